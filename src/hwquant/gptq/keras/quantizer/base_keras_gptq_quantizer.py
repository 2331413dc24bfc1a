"""MCT's module `model_compression_toolkit.gptq.keras.quantizer.base_keras_gptq_quantizer`:
the base of Keras GPTQ weight quantizers."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "BaseKerasGPTQTrainableQuantizer": "hwquant.keras.gptq.quantizers"}, globals())
