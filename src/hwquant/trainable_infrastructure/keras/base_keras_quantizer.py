"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.base_keras_quantizer`:
the base of trainable Keras quantizers (hwquant.keras.trainable)."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"BaseKerasTrainableQuantizer": "hwquant.keras.trainable"}, globals())
