"""`mct.data_generation`: images generated from the float model alone, written once
(framework-free, in this package) over a small back end per framework (hwquant.torch.data_generation,
hwquant.keras.data_generation), whose facades load on first use."""
from hwquant.data_generation.config import (  # noqa: F401
    BatchNormAlignemntLossType, BNLayerWeightingType, DataGenerationConfig, DataInitType, ImageGranularity,
    ImageNormalizationType, ImagePipelineType, OutputLossType, SchedulerType)
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table("hwquant.data_generation", {
    "get_pytorch_data_generation_config": "hwquant.torch.data_generation",
    "pytorch_data_generation_experimental": "hwquant.torch.data_generation",
    "get_keras_data_generation_config": "hwquant.keras.data_generation",
    "keras_data_generation_experimental": "hwquant.keras.data_generation",
}, globals())
