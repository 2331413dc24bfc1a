"""MCT's module `model_compression_toolkit.gptq.keras.quantizer.soft_rounding.symmetric_soft_quantizer`:
soft rounding, power-of-two / symmetric."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"SymmetricSoftRoundingGPTQ": "hwquant.keras.gptq.quantizers"}, globals())
