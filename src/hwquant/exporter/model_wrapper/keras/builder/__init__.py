"""MCT's module `model_compression_toolkit.exporter.model_wrapper.keras.builder`:
the exportable Keras model's builder."""
from hwquant.exporter.model_wrapper.keras.builder import fully_quantized_model_builder  # noqa: F401
