"""`mct.gptq`: gradient-based post-training quantization. The configuration is framework-free; each
framework's functions load on first use (hwquant.torch.gptq, hwquant.keras.gptq)."""
from hwquant.gptq.config import (GPTQHessianScoresConfig, GradientPTQConfig,  # noqa: F401
                                 GradualActivationQuantizationConfig, QFractionLinearAnnealingConfig, RoundingType)
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "get_pytorch_gptq_config": "hwquant.torch.gptq.facade",
    "pytorch_gradient_post_training_quantization": "hwquant.torch.gptq.facade",
    "get_keras_gptq_config": "hwquant.keras.gptq.facade",
    "keras_gradient_post_training_quantization": "hwquant.keras.gptq.facade",
}, globals())
