"""`mct.core.mixed_precision_quantization_config` (MCT's module of that name)."""
from hwquant.core.config import MixedPrecisionQuantizationConfig, MpDistanceWeighting, MpMetricNormalization  # noqa: F401 (re-exported)
