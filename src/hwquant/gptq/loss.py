"""GPTQ's losses, written once over a small set of tensor operations each framework gives (``ops``: a
``GPTQOps`` of gptq/training.py), so the same formulas run under torch's autograd and Keras' backends: how far
the quantized model's activations at the interest points are from the float model's. Both take MCT's loss
signature (after ``ops``), which a user's ``loss`` must also take:

    loss(quantized_points, float_points, quantized_kernels, float_kernels, bn_means, bn_stds, weights)

(the kernels and the batch-norm priors are given for losses that want them; these two ignore them).
"""
from __future__ import annotations

from typing import Any, List, Optional


def _squared_error_per_sample(ops: Any, q: Any, f: Any) -> Any:
    """Per sample: the squared error summed over the channel axis, averaged over the rest."""
    e = ops.square(q - f)
    if len(e.shape) == 1:
        return e
    e = ops.sum(e, ops.channel_axis)
    return ops.mean(ops.reshape(e, (e.shape[0], -1)), 1) if len(e.shape) > 1 else e


def multiple_tensors_mse_loss(ops: Any, quantized: List[Any], float_: List[Any], quantized_kernels: Any = None,
                              float_kernels: Any = None, bn_means: Any = None, bn_stds: Any = None,
                              loss_weights: Optional[Any] = None) -> Any:
    """Mean over interest points of ``weight * MSE / mean(float ** 2)`` (a normalized MSE, so points of
    different magnitudes count alike); no weights: a plain mean."""
    losses = ops.stack([ops.mean(ops.square(q - f)) / ops.maximum(ops.mean(ops.square(f)), 1e-12)
                        for q, f in zip(quantized, float_)])
    return ops.mean(losses if loss_weights is None else ops.like(loss_weights, losses) * losses)


def sample_layer_attention_loss(ops: Any, quantized: List[Any], float_: List[Any], quantized_kernels: Any,
                                float_kernels: Any, bn_means: Any, bn_stds: Any, loss_weights: Any) -> Any:
    """Sample-layer attention: each sample's squared error at each interest point weighted by its own Hessian
    score (``loss_weights``: batch x points), summed over points, divided by the largest mean weight of a point
    (so the loss scale does not depend on the model's Hessian scale)."""
    if loss_weights is None or len(loss_weights.shape) != 2 or loss_weights.shape[1] != len(quantized):
        raise ValueError(f"sample-layer attention needs weights of shape (batch, {len(quantized)} points), got "
                         f"{None if loss_weights is None else tuple(loss_weights.shape)}")
    total = 0
    for i, (q, f) in enumerate(zip(quantized, float_)):
        total = total + ops.mean(ops.like(loss_weights[:, i], q) * _squared_error_per_sample(ops, q, f))
    return total / ops.maximum(ops.max(ops.mean(loss_weights, 0)), 1e-30)
