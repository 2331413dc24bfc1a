"""GPTQ losses for PyTorch: how far the quantized model's activations at the interest points are
from the float model's. Both take MCT's loss signature, which a user's ``loss`` must also take:

    loss(quantized_points, float_points, quantized_kernels, float_kernels, bn_means, bn_stds, weights)

(the kernels and the batch-norm priors are given for losses that want them; these two ignore them).
"""
from __future__ import annotations

from typing import Any, List, Optional

import torch


def _squared_error_per_sample(q: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Per sample: the squared error summed over the channel axis (1), averaged over the rest."""
    e = (q - f).pow(2)
    e = e.sum(1) if e.dim() > 1 else e
    return e.flatten(1).mean(1) if e.dim() > 1 else e


def multiple_tensors_mse_loss(quantized: List[torch.Tensor], float_: List[torch.Tensor], quantized_kernels: Any = None,
                              float_kernels: Any = None, bn_means: Any = None, bn_stds: Any = None,
                              loss_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean over interest points of ``weight * MSE / mean(float ** 2)`` (a normalized MSE, so points of
    different magnitudes count alike); no weights: a plain mean."""
    losses = torch.stack([torch.mean((q - f).pow(2)) / torch.mean(f.pow(2)).clamp_min(1e-12)
                          for q, f in zip(quantized, float_)])
    return torch.mean(losses if loss_weights is None else loss_weights.to(losses) * losses)


def sample_layer_attention_loss(quantized: List[torch.Tensor], float_: List[torch.Tensor], quantized_kernels: Any,
                                float_kernels: Any, bn_means: Any, bn_stds: Any,
                                loss_weights: torch.Tensor) -> torch.Tensor:
    """Sample-layer attention: each sample's squared error at each interest point weighted by its own
    Hessian score (``loss_weights``: batch x points), summed over points, divided by the largest
    mean weight of a point (so the loss scale does not depend on the model's Hessian scale)."""
    if loss_weights is None or loss_weights.dim() != 2 or loss_weights.shape[1] != len(quantized):
        raise ValueError(f"sample-layer attention needs weights of shape (batch, {len(quantized)} points), got "
                         f"{None if loss_weights is None else tuple(loss_weights.shape)}")
    total = 0
    for i, (q, f) in enumerate(zip(quantized, float_)):
        total = total + torch.mean(loss_weights[:, i].to(q) * _squared_error_per_sample(q, f))
    return total / loss_weights.mean(0).max().clamp_min(1e-30)
