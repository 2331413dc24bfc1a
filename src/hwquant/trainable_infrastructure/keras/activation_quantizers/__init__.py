"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers`:
the trainable Keras activation quantizers (hwquant.keras.trainable)."""
from hwquant.trainable_infrastructure.keras.activation_quantizers import base_activation_quantizer, lsq, ste  # noqa: F401
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "BaseKerasActivationTrainableQuantizer": "hwquant.keras.trainable",
    "STESymmetricActivationTrainableQuantizer": "hwquant.keras.trainable",
    "STEUniformActivationTrainableQuantizer": "hwquant.keras.trainable",
    "LSQSymmetricActivationTrainableQuantizer": "hwquant.keras.trainable",
    "LSQUniformActivationTrainableQuantizer": "hwquant.keras.trainable",
}, globals())
