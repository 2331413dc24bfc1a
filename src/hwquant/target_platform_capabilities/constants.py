"""MCT's module `model_compression_toolkit.target_platform_capabilities.constants`: the names of weight
attributes in a TPC (framework-neutral: KERNEL_ATTR, BIAS_ATTR, POS_ATTR; each framework's own), the
platform names and versions."""
from hwquant.constants import BIAS_ATTR, KERNEL_ATTR, WEIGHTS_N_BITS  # noqa: F401
from hwquant.constants import IMX500_TPC as IMX500_TP_MODEL  # noqa: F401
from hwquant.constants import POSITIONAL_ATTR as POS_ATTR  # noqa: F401
from hwquant.constants import QNNPACK_TPC as QNNPACK_TP_MODEL  # noqa: F401
from hwquant.constants import TFLITE_TPC as TFLITE_TP_MODEL  # noqa: F401

KERAS_KERNEL = "kernel"
KERAS_DEPTHWISE_KERNEL = "depthwise_kernel"
BIAS = "bias"
PYTORCH_KERNEL = "weight"
WEIGHTS_QUANTIZATION_METHOD = "weights_quantization_method"
OPS_SET_LIST = "ops_set_list"
TPC_V1_0, TPC_V4_0, TPC_V5_0, TPC_V6_0 = "1.0", "4.0", "5.0", "6.0"
SDSP_V3_14, SDSP_V3_16, SDSP_V3_17, SDSP_V3_18 = "3.14", "3.16", "3.17", "3.18"
