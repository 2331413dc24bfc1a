"""MCT's module `model_compression_toolkit.qat.keras.quantizer.lsq.symmetric_lsq`:
the LSQ weight quantizer, power-of-two / symmetric (hwquant's LSQSymmetricWeightsTrainableQuantizer)."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"LSQWeightQATQuantizer": "hwquant.keras.mct_paths"}, globals())
