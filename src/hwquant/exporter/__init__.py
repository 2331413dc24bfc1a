"""`mct.exporter`: write quantized models for deployment and read them back."""
from hwquant.exporter.formats import (DEFAULT_ONNX_OPSET_VERSION, KerasExportSerializationFormat,  # noqa: F401
                                      PytorchExportSerializationFormat, QuantizationFormat)
from hwquant.exporter.pytorch_exporter import pytorch_export_model  # noqa: F401


def __getattr__(name):
    # onnx / onnxruntime helpers load lazily: `import hwquant` must not need them.
    if name in ("mctq_inference_session", "lower_mctq"):
        from hwquant.exporter import onnx_runtime
        return getattr(onnx_runtime, name)
    if name == "is_pytorch_layer_exportable":
        from hwquant.torch.export_model import is_pytorch_layer_exportable
        return is_pytorch_layer_exportable
    if name in ("keras_export_model", "is_keras_layer_exportable"):
        from hwquant.keras import export
        return getattr(export, name)
    if name in ("save_quantized_model", "load_quantized_model", "SavedModelError"):
        from hwquant.torch import saved_model
        return getattr(saved_model, name)
    raise AttributeError(f"module 'hwquant.exporter' has no attribute {name!r}")
