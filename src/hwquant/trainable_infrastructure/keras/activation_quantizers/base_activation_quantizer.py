"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.base_activation_quantizer`:
the base of trainable activation quantizers."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "BaseKerasActivationTrainableQuantizer": "hwquant.keras.trainable"}, globals())
