"""MCT's module `model_compression_toolkit.qat.keras.quantizer.ste_rounding`: STE weight quantizers."""
from hwquant.qat.keras.quantizer.ste_rounding import symmetric_ste, uniform_ste  # noqa: F401 (MCT's attribute paths)
