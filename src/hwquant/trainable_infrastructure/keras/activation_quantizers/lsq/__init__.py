"""MCT's module `model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.lsq`:
LSQ activation quantizers."""
from hwquant.trainable_infrastructure.keras.activation_quantizers.lsq import symmetric_lsq, uniform_lsq  # noqa: F401
