"""MCT's module `model_compression_toolkit.qat.keras.quantizer`: the Keras QAT weight quantizers."""
from hwquant.qat.keras.quantizer import base_keras_qat_weight_quantizer, lsq, ste_rounding  # noqa: F401
