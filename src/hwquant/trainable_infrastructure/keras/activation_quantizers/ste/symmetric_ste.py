"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.ste.symmetric_ste`:
the STE activation quantizer, power-of-two / symmetric."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "STESymmetricActivationTrainableQuantizer": "hwquant.keras.trainable"}, globals())
