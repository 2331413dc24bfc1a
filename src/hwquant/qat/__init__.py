"""`mct.qat`: quantization-aware training (the facades load torch on first use)."""
from hwquant.qat.config import QATConfig  # noqa: F401
from hwquant.trainable_infrastructure.common import TrainingMethod  # noqa: F401

_FACADES = ("pytorch_quantization_aware_training_init_experimental",
            "pytorch_quantization_aware_training_finalize_experimental")


def __getattr__(name):
    if name in _FACADES:
        import importlib
        return getattr(importlib.import_module("hwquant.qat.pytorch_facade"), name)
    raise AttributeError(f"module 'hwquant.qat' has no attribute {name!r}")
