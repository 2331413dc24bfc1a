"""`mct.qat`: quantization-aware training; each framework's facades load on first use (hwquant.torch.qat,
hwquant.keras.qat)."""
from hwquant.lazy import lazy_table
from hwquant.qat.config import QATConfig  # noqa: F401
from hwquant.trainable_infrastructure.common import TrainingMethod  # noqa: F401

__getattr__, __dir__ = lazy_table(__name__, {
    "pytorch_quantization_aware_training_init_experimental": "hwquant.torch.qat",
    "pytorch_quantization_aware_training_finalize_experimental": "hwquant.torch.qat",
    "keras_quantization_aware_training_init_experimental": "hwquant.keras.qat",
    "keras_quantization_aware_training_finalize_experimental": "hwquant.keras.qat",
}, globals())
