"""MCT's module `model_compression_toolkit.gptq.keras`: Keras GPTQ (framework-free tables)."""
from hwquant.gptq.keras import quantization_facade, quantizer  # noqa: F401 (MCT's attribute paths)
