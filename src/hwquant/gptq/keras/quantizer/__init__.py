"""MCT's module `model_compression_toolkit.gptq.keras.quantizer`: the Keras GPTQ weight quantizers."""
from hwquant.gptq.keras.quantizer import base_keras_gptq_quantizer, soft_rounding, ste_rounding  # noqa: F401
