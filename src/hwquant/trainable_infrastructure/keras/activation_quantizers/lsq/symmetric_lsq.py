"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.lsq.symmetric_lsq`:
the LSQ activation quantizer, power-of-two / symmetric."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "LSQSymmetricActivationTrainableQuantizer": "hwquant.keras.trainable"}, globals())
