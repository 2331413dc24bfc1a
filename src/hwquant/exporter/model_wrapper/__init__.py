"""MCT's module `model_compression_toolkit.exporter.model_wrapper`:
the exportable model and the layer checks (framework-free tables)."""
from hwquant.exporter.model_wrapper import keras  # noqa: F401 (MCT's attribute paths)
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "is_keras_layer_exportable": "hwquant.keras.export",
    "get_exportable_keras_model": "hwquant.keras.mct_paths",
    "is_pytorch_layer_exportable": "hwquant.torch.export_model",
}, globals())
