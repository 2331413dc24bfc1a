"""MCT's module `model_compression_toolkit.gptq.keras.quantizer.ste_rounding.symmetric_ste`:
STE rounding, power-of-two / symmetric (hwquant's STESymmetricGPTQ)."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"STEWeightGPTQQuantizer": "hwquant.keras.mct_paths"}, globals())
