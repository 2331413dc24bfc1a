"""MCT's module `model_compression_toolkit.qat.keras.quantizer.lsq`: LSQ weight quantizers."""
from hwquant.qat.keras.quantizer.lsq import symmetric_lsq, uniform_lsq  # noqa: F401 (MCT's attribute paths)
