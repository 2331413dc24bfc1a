"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.lsq.uniform_lsq`:
the LSQ activation quantizer, uniform."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "LSQUniformActivationTrainableQuantizer": "hwquant.keras.trainable"}, globals())
