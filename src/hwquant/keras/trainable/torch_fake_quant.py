"""The trainable Keras quantizers' fake quantization on Keras' torch backend: one ``torch.autograd.Function``
(as hwquant's PyTorch quantizers, torch/trainable/fake_quant.py), imported only when Keras runs on torch.

Keras' torch backend runs the training step eagerly, op by op. ``keras.ops.custom_gradient`` there had to
compute the forward pass again in the backward pass (an output held by its closure kept every step's
activations alive) and returned the zero point's and the scale's gradients even where nothing learns them.
The Function keeps the forward values for the backward pass (``save_for_backward``, no reference cycle),
computes only the gradients autograd asks for, and costs one autograd node per quantizer. The arithmetic is
``quant_math``'s, so the values and gradients are those of the other backends.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from hwquant.core.numerics import quant_math


class _AffineFakeQuantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor):
        grid = quant_math.AffineGrid(scale.detach(), 0.0 if zero_point is None else zero_point.detach(), qmin, qmax, axis)
        y, inside = quant_math.affine_fake_quantize_forward(x, grid)
        ctx.save_for_backward(x, y, inside, scale, zero_point)
        ctx.axis, ctx.learn_rounding, ctx.scale_grad_factor = axis, learn_rounding, scale_grad_factor
        return y

    @staticmethod
    def backward(ctx, g):
        x, y, inside, scale, zero_point = ctx.saved_tensors
        want_zero_point = zero_point is not None and ctx.needs_input_grad[2]
        gx, gs, gz = quant_math.affine_fake_quantize_gradients(
            g, x, y, inside, scale.detach(), None if zero_point is None else zero_point.detach(), ctx.axis,
            ctx.learn_rounding, ctx.scale_grad_factor, ctx.needs_input_grad[1], want_zero_point)
        return (gx if ctx.needs_input_grad[0] else None), gs, gz, None, None, None, None, None


def affine_fake_quantize(x: Any, scale: Any, zero_point: Optional[Any], qmin: int, qmax: int, axis: Optional[int],
                         learn_rounding: bool, scale_grad_factor: float) -> Any:
    """``x`` (a torch tensor) fake-quantized onto the grid of ``scale`` and ``zero_point`` (torch tensors of
    x's dtype, attached to the learned variables; zero_point None for a symmetric grid), with the
    straight-through gradient to x and the STE / LSQ gradients to the scale and the zero point."""
    return _AffineFakeQuantize.apply(x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor)
