"""MCT's module `model_compression_toolkit.qat.keras.quantization_facade`: the Keras QAT facades."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "keras_quantization_aware_training_init_experimental": "hwquant.keras.qat",
    "keras_quantization_aware_training_finalize_experimental": "hwquant.keras.qat",
}, globals())
