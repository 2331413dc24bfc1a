"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.quantize_wrapper`:
the wrapper of trainable quantizers, hwquant's one Keras wrapper."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"KerasTrainableQuantizationWrapper": "hwquant.keras.mct_paths"}, globals())
