"""`mct.gptq`: gradient-based post-training quantization. The configuration is here (framework-free);
the PyTorch facades (`pytorch_gradient_post_training_quantization`, `get_pytorch_gptq_config`) are
the next step of issue 7."""
from hwquant.gptq.config import (GPTQHessianScoresConfig, GradientPTQConfig,  # noqa: F401
                                 GradualActivationQuantizationConfig, QFractionLinearAnnealingConfig, RoundingType)
