"""Differentiable fake quantization onto an affine grid, for trainable quantizers.

The forward pass is `quant_math`'s own (round, clip, dequantize: the same operations as the inferable
quantizer, so a trained quantizer and its inferable conversion give bitwise the same values). The
backward pass is written out rather than left to autograd, because rounding has no useful gradient:

    y = (clip(round(x / s) + z, qmin, qmax) - z) * s,   r = round(x / s) + z

    dy/dx = 1 where qmin <= r <= qmax, else 0                      (straight-through rounding)
    dy/ds = round(x / s) - x / s inside (LSQ) or 0 inside (STE);  qmin - z below;  qmax - z above
    dy/dz = 0 inside;  -s outside

The zero point must hold integers of [qmin, qmax] (a learned one is rounded before, with
:func:`straight_through`).

The scale's gradient is multiplied by ``scale_grad_factor`` (LSQ's 1 / sqrt(N * Q_max)).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from hwquant.core import quant_math


def _sum_to(t: torch.Tensor, like: torch.Tensor, axis: Optional[int]) -> torch.Tensor:
    """Sum a gradient of x's shape down to the shape of a per-tensor / per-channel parameter."""
    if like.numel() == 1 or axis is None:
        return t.sum().reshape(like.shape)
    dims = [d for d in range(t.dim()) if d != axis % t.dim()]
    return t.sum(dim=dims).reshape(like.shape)


class _AffineFakeQuantize(torch.autograd.Function):
    # The backward pass uses y = (q - z) s, so that every term is a sum over x's elements:
    #   dL/ds = sum(g (y - inside x)) / s  (LSQ),  sum(g outside y) / s  (STE),   dL/dz = -s sum(g outside)
    @staticmethod
    def forward(ctx, x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor):
        grid = quant_math.AffineGrid(scale.detach(), zero_point.detach(), qmin, qmax, axis)
        r = quant_math.unclipped_integers(x, grid)
        q = r.clamp(qmin, qmax)
        y = quant_math.dequantize(q, grid)
        ctx.save_for_backward(x, y, q == r, scale, zero_point)
        ctx.axis, ctx.learn_rounding, ctx.scale_grad_factor = axis, learn_rounding, scale_grad_factor
        return y

    @staticmethod
    def backward(ctx, g):
        x, y, inside, scale, zero_point = ctx.saved_tensors
        gx = torch.where(inside, g, torch.zeros_like(g))
        gs = gz = None
        if ctx.needs_input_grad[1]:
            moved = g * y - gx * x if ctx.learn_rounding else (g - gx) * y
            gs = (_sum_to(moved, scale, ctx.axis) / scale.detach()) * ctx.scale_grad_factor
        if ctx.needs_input_grad[2]:
            gz = -scale.detach() * _sum_to(g - gx, zero_point, ctx.axis)
        return (gx if ctx.needs_input_grad[0] else None), gs, gz, None, None, None, None, None


def affine_fake_quantize(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, qmin: int, qmax: int,
                         axis: Optional[int] = None, learn_rounding: bool = False,
                         scale_grad_factor: float = 1.0) -> torch.Tensor:
    """Fake-quantize ``x`` with gradients to x (straight-through), the scale and the zero point
    (see the module docstring; ``learn_rounding`` selects LSQ's scale gradient)."""
    return _AffineFakeQuantize.apply(x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor)


def lsq_gradient_factor(elements_per_scale: int, qmax: int) -> float:
    """LSQ's step-size gradient scale 1 / sqrt(N * Q_max) (Esser et al. 2020, section 2.2)."""
    return 1.0 / math.sqrt(max(elements_per_scale, 1) * max(qmax, 1))


def straight_through(value: torch.Tensor, forward_value: torch.Tensor) -> torch.Tensor:
    """``forward_value`` in the forward pass, the gradient of ``value`` in the backward pass."""
    return value + (forward_value - value).detach()
