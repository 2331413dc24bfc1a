"""`mct.exporter`: write quantized models for deployment and read them back. The formats are
framework-free; the exporters of each framework, and the onnx / onnxruntime helpers, load on first use."""
from hwquant.exporter.formats import (DEFAULT_ONNX_OPSET_VERSION, KerasExportSerializationFormat,  # noqa: F401
                                      PytorchExportSerializationFormat, QuantizationFormat)
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "pytorch_export_model": "hwquant.torch.deployment.exporter",
    "is_pytorch_layer_exportable": "hwquant.torch.deployment.export_model",
    "save_quantized_model": "hwquant.torch.deployment.saved_model",
    "load_quantized_model": "hwquant.torch.deployment.saved_model",
    "SavedModelError": "hwquant.torch.deployment.saved_model",
    "keras_export_model": "hwquant.keras.export",
    "is_keras_layer_exportable": "hwquant.keras.export",
    "mctq_inference_session": "hwquant.exporter.onnx_runtime",
    "lower_mctq": "hwquant.exporter.onnx_runtime",
}, globals())
