"""`mct.data_generation` (issue 32, in progress): MCT 2.6.1's configuration names, framework-free. The generator
and the facades (pytorch_data_generation_experimental, keras_data_generation_experimental) are not there yet."""
from hwquant.data_generation.config import (  # noqa: F401
    BatchNormAlignemntLossType, BNLayerWeightingType, DataGenerationConfig, DataInitType, ImageGranularity,
    ImageNormalizationType, ImagePipelineType, OutputLossType, SchedulerType)
