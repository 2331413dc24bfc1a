"""MCT's module `model_compression_toolkit.gptq.keras.quantizer.soft_rounding.uniform_soft_quantizer`:
soft rounding, uniform."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {"UniformSoftRoundingGPTQ": "hwquant.keras.gptq.quantizers"}, globals())
