"""Names and numbers shared across the toolkit (the documented API refers to some of them)."""

# Keys of quantization-parameter dictionaries.
THRESHOLD = "threshold"
SIGNED = "is_signed"
RANGE_MIN = "range_min"
RANGE_MAX = "range_max"
LUT_VALUES = "lut_values"
LUT_VALUES_BITWIDTH = 8
SCALE_PER_CHANNEL = "scale_per_channel"

# Smallest threshold a threshold search may return (avoids a zero scale).
MIN_THRESHOLD = 2.0 ** -16
# Bit width that stands for "not quantized".
FLOAT_BITWIDTH = 32
# Bit widths a quantizer accepts.
MIN_N_BITS = 2
MAX_N_BITS = 16

# Framework-neutral names of weight attributes in a TPC; each framework maps them to its own
# (PyTorch: weight / bias, Keras: kernel / bias).
KERNEL_ATTR = "kernel_attr"
BIAS_ATTR = "bias_attr"
POSITIONAL_ATTR = "pos_attr"
WEIGHTS_N_BITS = "weights_n_bits"

# Platform types of the shipped TPCs.
IMX500_TPC = "imx500"
TFLITE_TPC = "tflite"
QNNPACK_TPC = "qnnpack"
DEFAULT_TPC_VERSION = "1.0"
