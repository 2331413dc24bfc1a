"""MCT's module `model_compression_toolkit.gptq.keras.quantizer.soft_rounding`: GPTQ soft-rounding quantizers."""
from hwquant.gptq.keras.quantizer.soft_rounding import symmetric_soft_quantizer, uniform_soft_quantizer  # noqa: F401
