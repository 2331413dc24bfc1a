"""MCT's module `model_compression_toolkit.qat.keras.quantizer.ste_rounding.symmetric_ste`:
the STE weight quantizer, power-of-two / symmetric (hwquant's STESymmetricWeightsTrainableQuantizer)."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"STEWeightQATQuantizer": "hwquant.keras.mct_paths"}, globals())
