"""`mct.data_generation` (issue 32, in progress): images generated from the float model alone, written once
(framework-free, in this package) over a small back end per framework. The PyTorch facades are there
(hwquant.torch.data_generation); the Keras ones are not yet."""
from hwquant.data_generation.config import (  # noqa: F401
    BatchNormAlignemntLossType, BNLayerWeightingType, DataGenerationConfig, DataInitType, ImageGranularity,
    ImageNormalizationType, ImagePipelineType, OutputLossType, SchedulerType)
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table("hwquant.data_generation", {
    "get_pytorch_data_generation_config": "hwquant.torch.data_generation",
    "pytorch_data_generation_experimental": "hwquant.torch.data_generation",
}, globals())
