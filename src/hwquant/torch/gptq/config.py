"""`mct.gptq.get_pytorch_gptq_config`: a GradientPTQConfig with PyTorch optimizers and MCT 2.6's
defaults."""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch

from hwquant.gptq.config import (ACT_HESSIAN_DEFAULT_BATCH_SIZE, GPTQHessianScoresConfig, GradientPTQConfig,
                                 GradualActivationQuantizationConfig)

LR_DEFAULT = 3e-2        # the rounding variables
LR_REST_DEFAULT = 1e-4   # the quantizers' other parameters
LR_BIAS_DEFAULT = 1e-4
BIAS_MOMENTUM = 0.9
REG_DEFAULT = 0.01       # rounding regulariser factor, loss without sample-layer attention
REG_DEFAULT_SLA = 10.0   # ... with sample-layer attention (its loss is on another scale)
HESSIAN_NUM_SAMPLES = 256


def _placeholder_optimizer(cls, **kwargs) -> torch.optim.Optimizer:
    """An optimizer over a dummy tensor: what the API takes, its class and settings reused on the real
    variables (as MCT documents: "other PyTorch optimizers can be passed with dummy params")."""
    return cls([torch.zeros(0, requires_grad=True)], **kwargs)


def get_pytorch_gptq_config(n_epochs: int, optimizer: Optional[torch.optim.Optimizer] = None,
                            optimizer_rest: Optional[torch.optim.Optimizer] = None, loss: Optional[Callable] = None,
                            log_function: Optional[Callable] = None, use_hessian_based_weights: bool = True,
                            regularization_factor: Optional[float] = None,
                            hessian_batch_size: int = ACT_HESSIAN_DEFAULT_BATCH_SIZE,
                            use_hessian_sample_attention: bool = True,
                            gradual_activation_quantization: Union[bool, GradualActivationQuantizationConfig] = True
                            ) -> GradientPTQConfig:
    """A GradientPTQConfig for PyTorch models: Adam (lr 3e-2) for the rounding variables, Adam (lr 1e-4)
    for the rest, SGD (lr 1e-4, momentum 0.9) for the biases; Hessian-based loss weights, per sample
    (sample-layer attention) by default; gradual activation quantization on by default. ``loss`` None
    takes the default loss of the chosen weighting."""
    if use_hessian_sample_attention and not use_hessian_based_weights:
        raise ValueError("use_hessian_sample_attention=True needs use_hessian_based_weights=True "
                         "(sample-layer attention is a Hessian-based weighting)")
    if isinstance(gradual_activation_quantization, bool):
        gradual = GradualActivationQuantizationConfig() if gradual_activation_quantization else None
    elif isinstance(gradual_activation_quantization, GradualActivationQuantizationConfig):
        gradual = gradual_activation_quantization
    else:
        raise TypeError(f"gradual_activation_quantization must be a bool or a GradualActivationQuantizationConfig, "
                        f"got {type(gradual_activation_quantization).__name__}")
    for name, value in (("optimizer", optimizer), ("optimizer_rest", optimizer_rest)):
        if value is not None and not isinstance(value, torch.optim.Optimizer):
            raise TypeError(f"{name} must be a torch.optim.Optimizer (over a dummy tensor, e.g. "
                            f"torch.optim.Adam([torch.zeros(0)], lr=1e-2)) or None, got {type(value).__name__}")
    hessian = None
    if use_hessian_based_weights:
        hessian = GPTQHessianScoresConfig(per_sample=use_hessian_sample_attention,
                                          hessians_num_samples=None if use_hessian_sample_attention else HESSIAN_NUM_SAMPLES,
                                          hessian_batch_size=hessian_batch_size)
    if regularization_factor is None:
        regularization_factor = REG_DEFAULT_SLA if use_hessian_sample_attention else REG_DEFAULT
    return GradientPTQConfig(
        n_epochs=n_epochs, loss=loss,
        optimizer=optimizer or _placeholder_optimizer(torch.optim.Adam, lr=LR_DEFAULT),
        optimizer_rest=optimizer_rest or _placeholder_optimizer(torch.optim.Adam, lr=LR_REST_DEFAULT),
        train_bias=True, hessian_weights_config=hessian, gradual_activation_quantization_config=gradual,
        regularization_factor=regularization_factor, log_function=log_function,
        optimizer_bias=_placeholder_optimizer(torch.optim.SGD, lr=LR_BIAS_DEFAULT, momentum=BIAS_MOMENTUM))
