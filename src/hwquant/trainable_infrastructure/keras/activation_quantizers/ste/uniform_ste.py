"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.ste.uniform_ste`:
the STE activation quantizer, uniform."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "STEUniformActivationTrainableQuantizer": "hwquant.keras.trainable"}, globals())
