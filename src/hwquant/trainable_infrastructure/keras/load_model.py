"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.load_model`:
loading a quantized Keras model (trainable quantizers too)."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"keras_load_quantized_model": "hwquant.keras.facade"}, globals())
