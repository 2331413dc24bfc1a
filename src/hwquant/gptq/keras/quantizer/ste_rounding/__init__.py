"""MCT's module `model_compression_toolkit.gptq.keras.quantizer.ste_rounding`: GPTQ STE-rounding quantizers."""
from hwquant.gptq.keras.quantizer.ste_rounding import symmetric_ste  # noqa: F401 (MCT's attribute paths)
