"""MCT's module `model_compression_toolkit.qat.keras.quantizer.lsq.uniform_lsq`:
the LSQ weight quantizer, uniform (hwquant's LSQUniformWeightsTrainableQuantizer)."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"LSQUniformWeightQATQuantizer": "hwquant.keras.mct_paths"}, globals())
