"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.ste`:
STE activation quantizers."""
from hwquant.trainable_infrastructure.keras.activation_quantizers.ste import symmetric_ste, uniform_ste  # noqa: F401
