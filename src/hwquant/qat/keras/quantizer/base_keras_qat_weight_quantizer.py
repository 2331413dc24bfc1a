"""MCT's module `model_compression_toolkit.qat.keras.quantizer.base_keras_qat_weight_quantizer`:
the base of QAT weight quantizers."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "BaseKerasQATWeightTrainableQuantizer": "hwquant.keras.mct_paths"}, globals())
