"""MCT's module `model_compression_toolkit.qat.keras.quantizer.ste_rounding.uniform_ste`:
the STE weight quantizer, uniform (hwquant's STEUniformWeightsTrainableQuantizer)."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"STEUniformWeightQATQuantizer": "hwquant.keras.mct_paths"}, globals())
