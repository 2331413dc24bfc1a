"""Export formats (the documented enum values) and which combinations exist."""
from __future__ import annotations

from enum import Enum
from typing import Any, Type

from hwquant.errors import ExportError


class QuantizationFormat(Enum):
    """How quantization appears in the exported file.

    FAKELY_QUANT: standard ONNX QuantizeLinear / DequantizeLinear (weights stored as integers), or
    fake-quantization ops in TorchScript. INT8: the same QDQ graph, refused unless every quantizer
    fits an 8-bit integer type (so the whole model can run on int8 kernels). MCTQ: the
    ``mct_quantizers`` custom ops (IMX500 tool chain)."""
    FAKELY_QUANT = 0
    INT8 = 1
    MCTQ = 2


class PytorchExportSerializationFormat(Enum):
    TORCHSCRIPT = 0
    ONNX = 1


class KerasExportSerializationFormat(Enum):
    """MCT's KERAS and TFLITE, and ONNX (written by Keras' own exporter; hwquant's addition)."""
    KERAS = 0
    TFLITE = 1
    ONNX = 2


# MCT's default ONNX opset; 16-bit QuantizeLinear types need 21.
DEFAULT_ONNX_OPSET_VERSION = 17
MIN_ONNX_OPSET_VERSION = 13  # per-axis QuantizeLinear / DequantizeLinear

SUPPORTED_PYTORCH_FORMATS = {
    PytorchExportSerializationFormat.ONNX: (QuantizationFormat.FAKELY_QUANT, QuantizationFormat.INT8,
                                            QuantizationFormat.MCTQ),
    PytorchExportSerializationFormat.TORCHSCRIPT: (QuantizationFormat.FAKELY_QUANT,),
}


def as_format(value: Any, enum_cls: Type[Enum], what: str) -> Enum:
    """Accept the enum, its name or its integer value."""
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls[value] if isinstance(value, str) else enum_cls(value)
    except (KeyError, ValueError):
        options = ", ".join(f"{enum_cls.__name__}.{m.name}" for m in enum_cls)
        raise ExportError(f"{what} must be one of {options}; got {value!r}") from None


def check_pytorch_combination(serialization: PytorchExportSerializationFormat, quantization: QuantizationFormat) -> None:
    allowed = SUPPORTED_PYTORCH_FORMATS[serialization]
    if quantization not in allowed:
        raise ExportError(
            f"{serialization.name} export does not support quantization_format={quantization.name}; "
            f"with {serialization.name} use {' or '.join(f.name for f in allowed)}"
            + ("; MCTQ custom ops and INT8 QDQ exist in ONNX (serialization_format=ONNX)"
               if serialization == PytorchExportSerializationFormat.TORCHSCRIPT else ""))
