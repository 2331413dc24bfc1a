"""MCT's module `model_compression_toolkit.exporter.model_wrapper.keras.validate_layer`:
the check of one quantized Keras layer."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"is_keras_layer_exportable": "hwquant.keras.export"}, globals())
