"""Enumerations of the target platform schema, with the integer values of the documented API."""
from enum import Enum, IntEnum


class QuantizationMethod(IntEnum):
    """How a tensor is mapped onto integers.

    POWER_OF_TWO: symmetric, uniform, threshold a power of two.
    LUT_POT_QUANTIZER: lookup table (non-uniform) with a power-of-two threshold.
    SYMMETRIC: symmetric, uniform, any threshold.
    UNIFORM: affine (min/max range with a zero point), zero exactly representable.
    LUT_SYM_QUANTIZER: lookup table with a symmetric threshold.
    """

    POWER_OF_TWO = 0
    LUT_POT_QUANTIZER = 1
    SYMMETRIC = 2
    UNIFORM = 3
    LUT_SYM_QUANTIZER = 4
    # Older spelling used by the seed documents.
    SYMMETRIC_UNIFORM = 2

    # mct-quantizers has its own QuantizationMethod (a plain Enum, same names and values), which its
    # quantizers report in ``quantization_method``: the two compare equal and convert into each other.
    def __eq__(self, other):
        if _is_mctq_method(other):
            return int(self) == other.value
        return int.__eq__(self, other)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = IntEnum.__hash__

    @classmethod
    def _missing_(cls, value):
        return cls(value.value) if _is_mctq_method(value) else None

    @property
    def is_lut(self) -> bool:
        return self in (QuantizationMethod.LUT_POT_QUANTIZER, QuantizationMethod.LUT_SYM_QUANTIZER)

    @property
    def is_power_of_two(self) -> bool:
        return self in (QuantizationMethod.POWER_OF_TWO, QuantizationMethod.LUT_POT_QUANTIZER)


class Signedness(IntEnum):
    """Signedness of an activation quantizer: decided from the data (AUTO) or forced."""

    AUTO = 0
    SIGNED = 1
    UNSIGNED = 2


class OperatorSetNames(str, Enum):
    """Standard operator-set names; the framework adapters attach their layers to these."""

    CONV = "Conv"
    DEPTHWISE_CONV = "DepthwiseConv2D"
    CONV_TRANSPOSE = "ConvTranspose"
    FULLY_CONNECTED = "FullyConnected"
    CONCATENATE = "Concatenate"
    STACK = "Stack"
    UNSTACK = "Unstack"
    GATHER = "Gather"
    EXPAND = "Expand"
    BATCH_NORM = "BatchNorm"
    L2NORM = "L2Norm"
    RELU = "ReLU"
    RELU6 = "ReLU6"
    LEAKY_RELU = "LeakyReLU"
    ELU = "Elu"
    HARD_TANH = "HardTanh"
    ADD = "Add"
    SUB = "Sub"
    MUL = "Mul"
    DIV = "Div"
    MIN = "Min"
    MAX = "Max"
    PRELU = "PReLU"
    ADD_BIAS = "AddBias"
    SWISH = "Swish"
    SIGMOID = "Sigmoid"
    SOFTMAX = "Softmax"
    LOG_SOFTMAX = "LogSoftmax"
    TANH = "Tanh"
    GELU = "Gelu"
    HARDSIGMOID = "HardSigmoid"
    HARDSWISH = "HardSwish"
    FLATTEN = "Flatten"
    GET_ITEM = "GetItem"
    RESHAPE = "Reshape"
    UNSQUEEZE = "Unsqueeze"
    SQUEEZE = "Squeeze"
    PERMUTE = "Permute"
    TRANSPOSE = "Transpose"
    DROPOUT = "Dropout"
    SPLIT_CHUNK = "SplitChunk"
    MAXPOOL = "MaxPool"
    AVGPOOL = "AvgPool"
    SIZE = "Size"
    SHAPE = "Shape"
    EQUAL = "Equal"
    ARGMAX = "ArgMax"
    TOPK = "TopK"
    FAKE_QUANT = "FakeQuant"
    COMBINED_NON_MAX_SUPPRESSION = "CombinedNonMaxSuppression"
    ZERO_PADDING2D = "ZeroPadding2D"
    CAST = "Cast"
    RESIZE = "Resize"
    PAD = "Pad"
    FOLD = "Fold"
    STRIDED_SLICE = "StridedSlice"
    SSD_POST_PROCESS = "SSDPostProcess"
    EXP = "Exp"
    SIN = "Sin"
    COS = "Cos"
    TAKE = "Take"
    INDEX_SELECT = "IndexSelect"

    @classmethod
    def get_values(cls) -> list:
        return [v.value for v in cls]


def _is_mctq_method(value) -> bool:
    t = type(value)
    return t.__name__ == "QuantizationMethod" and t.__module__.startswith("mct_quantizers") and isinstance(value.value, int)
