"""`mct.gptq`: gradient-based post-training quantization. The configuration is framework-free; the
PyTorch functions load torch on first use."""
from hwquant.gptq.config import (GPTQHessianScoresConfig, GradientPTQConfig,  # noqa: F401
                                 GradualActivationQuantizationConfig, QFractionLinearAnnealingConfig, RoundingType)

_LAZY = {"get_pytorch_gptq_config": "hwquant.gptq.pytorch_config",
         "pytorch_gradient_post_training_quantization": "hwquant.gptq.pytorch_facade"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hwquant.gptq' has no attribute {name!r}")
