"""GPTQ losses for Keras 3 (keras.ops, any backend), the twins of torch/gptq/loss.py, with MCT's loss
signature, which a user's ``loss`` must also take:

    loss(quantized_points, float_points, quantized_kernels, float_kernels, bn_means, bn_stds, weights)
"""
from __future__ import annotations

from typing import Any, List, Optional

from keras import ops


def _squared_error_per_sample(q: Any, f: Any) -> Any:
    """Per sample: the squared error summed over the channel axis (last), averaged over the rest."""
    e = ops.square(q - f)
    e = ops.sum(e, axis=-1) if len(e.shape) > 1 else e
    return ops.mean(ops.reshape(e, (ops.shape(e)[0], -1)), axis=1) if len(e.shape) > 1 else e


def multiple_tensors_mse_loss(quantized: List[Any], float_: List[Any], quantized_kernels: Any = None,
                              float_kernels: Any = None, bn_means: Any = None, bn_stds: Any = None,
                              loss_weights: Optional[Any] = None) -> Any:
    """Mean over interest points of ``weight * MSE / mean(float ** 2)``; no weights: a plain mean."""
    losses = ops.stack([ops.mean(ops.square(q - f)) / ops.maximum(ops.mean(ops.square(f)), 1e-12)
                        for q, f in zip(quantized, float_)])
    return ops.mean(losses if loss_weights is None else ops.cast(loss_weights, losses.dtype) * losses)


def sample_layer_attention_loss(quantized: List[Any], float_: List[Any], quantized_kernels: Any, float_kernels: Any,
                                bn_means: Any, bn_stds: Any, loss_weights: Any) -> Any:
    """Sample-layer attention: each sample's squared error at each interest point weighted by its own
    Hessian score (batch x points), summed over points, divided by the largest mean weight of a point."""
    if loss_weights is None or len(loss_weights.shape) != 2 or loss_weights.shape[1] != len(quantized):
        raise ValueError(f"sample-layer attention needs weights of shape (batch, {len(quantized)} points), got "
                         f"{None if loss_weights is None else tuple(loss_weights.shape)}")
    total = 0
    for i, (q, f) in enumerate(zip(quantized, float_)):
        total = total + ops.mean(ops.cast(loss_weights[:, i], q.dtype) * _squared_error_per_sample(q, f))
    return total / ops.maximum(ops.max(ops.mean(loss_weights, axis=0)), 1e-30)
