"""The trainable Keras quantizers' fake quantization on Keras' torch backend: one ``torch.autograd.Function``
(as hwquant's PyTorch quantizers, torch/trainable/fake_quant.py), imported only when Keras runs on torch.

Keras' torch backend runs the training step eagerly, op by op, so every pass over an activation and every
fresh activation-sized buffer counts (a QAT step of a small CNN spent about half its time in its quantizers).
``keras.ops.custom_gradient`` there computed the forward pass again in the backward pass (an output held by
its closure kept every step's activations alive), every gradient wanted or not, and the grid in a dozen
small Keras operations. This Function keeps what the backward pass needs (``save_for_backward``: no
reference cycle), computes only the gradients autograd asks for, writes its intermediates in place, and the
symmetric grid takes a handful of torch operations. Its operations are ``quant_math``'s
(``affine_fake_quantize_forward`` / ``affine_fake_quantize_gradients``) in the same order and dtype: the
same values and gradients (tests/test_keras_qat.py compares them; a zero gradient may carry g's sign).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from hwquant.core.numerics import quant_math

_HALF = (torch.float16, torch.bfloat16)


def _view(p: torch.Tensor, x: torch.Tensor, axis: Optional[int]) -> torch.Tensor:
    """A per-tensor or per-channel parameter in x's dtype, shaped to broadcast against x (quant_math.per_channel_view)."""
    p = p.detach().to(device=x.device, dtype=x.dtype)
    if axis is None or p.dim() == 0:
        return p
    return p.reshape([-1 if d == axis % x.dim() else 1 for d in range(x.dim())])


def _sum_to(t: torch.Tensor, like: torch.Tensor, axis: Optional[int]) -> torch.Tensor:
    """A gradient of x's shape summed down to a parameter's shape (the registered namespace's sum_to)."""
    return quant_math.namespace_of(t).sum_to(t, like, axis)


def _forward(x: torch.Tensor, scale: torch.Tensor, zero_point: Optional[torch.Tensor], qmin: int, qmax: int,
             axis: Optional[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(fake-quantized x, 1.0 where an element is inside [qmin, qmax] else 0.0): ``r = round(x / s) + z``,
    ``q = clip(r, qmin, qmax)``, ``y = (q - z) * s``, inside ``q == r``; half inputs computed in float32. Two
    buffers of x's size: the mask is written over r (a float mask: the backward pass multiplies by it, where
    ``torch.where`` on a bool mask costs twice as much)."""
    out = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    xc = x.float() if x.dtype in _HALF else x if x.is_floating_point() else x.to(out)
    s = _view(scale, xc, axis)
    r = (xc / s).round_()
    if zero_point is not None:
        z = _view(zero_point, xc, axis)
        r.add_(z)
    q = r.clamp(qmin, qmax)
    inside = torch.eq(q, r, out=r)
    if zero_point is not None:
        q.sub_(z)
    return q.mul_(s).to(out), inside


class _AffineFakeQuantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor):
        y, inside = _forward(x, scale, zero_point, qmin, qmax, axis)
        # what the backward pass reads: the mask; y for the scale's gradient, x too for LSQ's
        want_scale = ctx.needs_input_grad[1]
        ctx.save_for_backward(inside, y if want_scale else None, x if want_scale and learn_rounding else None, scale,
                              zero_point)
        ctx.axis, ctx.learn_rounding, ctx.scale_grad_factor = axis, learn_rounding, scale_grad_factor
        return y

    @staticmethod
    def backward(ctx, g):
        inside, y, x, scale, zero_point = ctx.saved_tensors
        want_x, want_scale = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_zero_point = zero_point is not None and ctx.needs_input_grad[2]
        if not g.is_contiguous() and inside.is_contiguous():  # (a permuted view from a Keras layer: one copy,
            g = g.contiguous()  # rather than every pass below striding through g)
        gx = (g * inside).to(g.dtype)  # (g where inside, 0 outside; `.to`: a half g against the float32 mask)
        gs = gz = None
        if want_scale and ctx.learn_rounding:  # LSQ: g y - g_inside x
            gs = _sum_to((g * y).sub_(gx * x), scale, ctx.axis) / scale.detach() * ctx.scale_grad_factor
        if want_zero_point or (want_scale and not ctx.learn_rounding):
            outside = g - gx
            if want_zero_point:
                gz = -scale.detach() * _sum_to(outside, zero_point, ctx.axis)
            if want_scale and not ctx.learn_rounding:  # STE: g_outside y
                gs = _sum_to(outside.mul_(y), scale, ctx.axis) / scale.detach() * ctx.scale_grad_factor
        return (gx if want_x else None), gs, gz, None, None, None, None, None


def affine_fake_quantize(x: Any, scale: Any, zero_point: Optional[Any], qmin: int, qmax: int, axis: Optional[int],
                         learn_rounding: bool, scale_grad_factor: float) -> Any:
    """``x`` (a torch tensor) fake-quantized onto the grid of ``scale`` and ``zero_point`` (torch tensors of
    x's dtype, attached to the learned variables; zero_point None for a symmetric grid), with the
    straight-through gradient to x and the STE / LSQ gradients to the scale and the zero point."""
    return _AffineFakeQuantize.apply(x, scale, zero_point, qmin, qmax, axis, learn_rounding, scale_grad_factor)


def symmetric_scale(threshold: torch.Tensor, min_threshold: float, power_of_two: bool, steps: float) -> torch.Tensor:
    """The scale of a learned symmetric / power-of-two threshold: ``quantizer_spec.threshold_of`` / ``grid_of``'s
    operations in torch's own (a handful instead of Keras' dozen per quantizer and step; the same values and
    gradients): the threshold clipped below at ``min_threshold``, rounded up to a power of two (straight
    through) for power-of-two quantizers, divided by ``steps`` (2**(n-1) signed, 2**n unsigned)."""
    t = threshold.clamp(min=min_threshold)
    if power_of_two:  # 2**ceil(log2 t), exactly: t = m * 2**e with m in [0.5, 1)
        m, e = torch.frexp(t.detach())
        p = torch.ldexp(torch.ones_like(m), e - (m == 0.5).to(e.dtype))
        t = t + (p - t).detach()
    return t / steps
