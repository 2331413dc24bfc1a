"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras`:
the Keras half of the trainable infrastructure (framework-free tables: each name loads keras when first used)."""
from hwquant.trainable_infrastructure.keras import activation_quantizers, base_keras_quantizer, load_model, quantize_wrapper  # noqa: F401
