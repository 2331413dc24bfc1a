"""MCT's module `model_compression_toolkit.qat.keras`: Keras quantization-aware training (framework-free tables)."""
from hwquant.qat.keras import quantization_facade, quantizer  # noqa: F401 (MCT's attribute paths)
