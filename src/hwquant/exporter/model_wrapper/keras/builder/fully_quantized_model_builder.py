"""MCT's module `model_compression_toolkit.exporter.model_wrapper.keras.builder.fully_quantized_model_builder`:
the exportable Keras model."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"get_exportable_keras_model": "hwquant.keras.mct_paths"}, globals())
