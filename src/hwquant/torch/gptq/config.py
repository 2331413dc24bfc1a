"""`mct.gptq.get_pytorch_gptq_config`: a GradientPTQConfig with PyTorch optimizers and MCT 2.6's
defaults (the rest of the defaults: gptq/config.py)."""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch

from hwquant.gptq.config import (ACT_HESSIAN_DEFAULT_BATCH_SIZE, BIAS_MOMENTUM, LR_BIAS_DEFAULT, LR_DEFAULT,
                                 LR_REST_DEFAULT, GradientPTQConfig, GradualActivationQuantizationConfig,
                                 gptq_config_with_defaults)


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
    for name, value in (("optimizer", optimizer), ("optimizer_rest", optimizer_rest)):
        if value is not None and not isinstance(value, torch.optim.Optimizer):
            raise TypeError(f"{name} must be a torch.optim.Optimizer (over a dummy tensor, e.g. "
                            f"torch.optim.Adam([torch.zeros(0)], lr=1e-2)) or None, got {type(value).__name__}")
    return gptq_config_with_defaults(
        n_epochs, optimizer or _placeholder_optimizer(torch.optim.Adam, lr=LR_DEFAULT),
        optimizer_rest or _placeholder_optimizer(torch.optim.Adam, lr=LR_REST_DEFAULT),
        _placeholder_optimizer(torch.optim.SGD, lr=LR_BIAS_DEFAULT, momentum=BIAS_MOMENTUM), loss, log_function,
        use_hessian_based_weights, regularization_factor, hessian_batch_size, use_hessian_sample_attention,
        gradual_activation_quantization)
