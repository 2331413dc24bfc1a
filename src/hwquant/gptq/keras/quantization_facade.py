"""MCT's module `model_compression_toolkit.gptq.keras.quantization_facade`: the Keras GPTQ facades."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "keras_gradient_post_training_quantization": "hwquant.keras.gptq.facade",
    "get_keras_gptq_config": "hwquant.keras.gptq.config",
}, globals())
