"""Differentiable fake quantization onto an affine grid, for trainable quantizers: `quant_math`'s
forward pass (the same operations as the inferable quantizer, so a trained quantizer and its inferable
conversion give bitwise the same values) and its straight-through / LSQ gradients
(``quant_math.affine_fake_quantize_gradients``), wrapped in a ``torch.autograd.Function``.

The zero point must hold integers of [qmin, qmax] (a learned one is rounded before, with
``quant_math.straight_through``).
"""
from __future__ import annotations

from typing import Optional

import torch

from hwquant.core.numerics import quant_math


class _AffineFakeQuantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor):
        grid = quant_math.AffineGrid(scale.detach(), zero_point.detach(), qmin, qmax, axis)
        y, inside = quant_math.affine_fake_quantize_forward(x, grid)
        ctx.save_for_backward(x, y, inside, scale, zero_point)
        ctx.axis, ctx.learn_rounding, ctx.scale_grad_factor = axis, learn_rounding, scale_grad_factor
        return y

    @staticmethod
    def backward(ctx, g):
        x, y, inside, scale, zero_point = ctx.saved_tensors
        gx, gs, gz = quant_math.affine_fake_quantize_gradients(
            g, x, y, inside, scale.detach(), zero_point.detach(), ctx.axis, ctx.learn_rounding,
            ctx.scale_grad_factor, ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        return (gx if ctx.needs_input_grad[0] else None), gs, gz, None, None, None, None, None


def affine_fake_quantize(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, qmin: int, qmax: int,
                         axis: Optional[int] = None, learn_rounding: bool = False,
                         scale_grad_factor: float = 1.0) -> torch.Tensor:
    """Fake-quantize ``x`` with gradients to x (straight-through), the scale and the zero point
    (``learn_rounding`` selects LSQ's scale gradient)."""
    return _AffineFakeQuantize.apply(x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor)
