"""`mct.gptq`: gradient-based post-training quantization. The configuration is framework-free;
`get_pytorch_gptq_config` loads torch on first use. (The PyTorch runner,
`pytorch_gradient_post_training_quantization`, is the next step of issue 7.)"""
from hwquant.gptq.config import (GPTQHessianScoresConfig, GradientPTQConfig,  # noqa: F401
                                 GradualActivationQuantizationConfig, QFractionLinearAnnealingConfig, RoundingType)


def __getattr__(name):
    if name == "get_pytorch_gptq_config":
        import importlib
        return importlib.import_module("hwquant.gptq.pytorch_config").get_pytorch_gptq_config
    raise AttributeError(f"module 'hwquant.gptq' has no attribute {name!r}")
