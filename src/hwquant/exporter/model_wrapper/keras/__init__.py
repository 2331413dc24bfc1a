"""MCT's module `model_compression_toolkit.exporter.model_wrapper.keras`: Keras."""
from hwquant.exporter.model_wrapper.keras import builder, validate_layer  # noqa: F401 (MCT's attribute paths)
