"""torch's operations for core/numerics/quant_math.py (registered when hwquant.torch loads)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from hwquant.core.numerics import quant_math


class TorchNamespace(quant_math.ArrayNamespace):
    ops = module = torch

    def owns(self, x) -> bool:
        return isinstance(x, torch.Tensor)

    def to_numpy(self, v) -> np.ndarray:
        return v.detach().cpu().numpy()

    def prepare(self, x):
        x = x if x.is_floating_point() else x.to(torch.get_default_dtype())
        return (x.float() if x.dtype in (torch.float16, torch.bfloat16) else x), x.dtype

    def cast(self, y, dtype):
        return y.to(dtype)

    def param(self, value, like):
        if isinstance(value, torch.Tensor):  # moved with .to, so that gradients reach it
            return value.to(device=like.device, dtype=like.dtype)
        return torch.as_tensor(np.asarray(quant_math._to_numpy(value)), dtype=like.dtype, device=like.device)

    def astype(self, x, dtype: str):
        return x.to(getattr(torch, dtype))

    def dequantized_in_place(self, units, zero_point, qmin: float, qmax: float, scale):
        if torch.is_grad_enabled():  # autograd keeps the intermediates: the step-by-step path
            return None
        units.round_()
        if zero_point is None:
            return units.clamp_(qmin, qmax).mul_(scale)
        return units.add_(zero_point).clamp_(qmin, qmax).sub_(zero_point).mul_(scale)

    def stop_gradient(self, x):
        return x.detach()

    def broadcast_to(self, x, shape):
        return x.expand(shape)

    def sum_to(self, t, like, axis: Optional[int]):
        if like.numel() == 1 or axis is None:
            return t.sum().reshape(like.shape)
        return t.sum(dim=[d for d in range(t.dim()) if d != axis % t.dim()]).reshape(like.shape)

    def power_of_two_ceil(self, t, min_threshold: float):
        t = t if t.is_floating_point() else t.to(torch.get_default_dtype())
        if (~torch.isfinite(t) | (t <= 0)).any():
            raise ValueError(f"threshold must be finite and > 0, got {t.detach().cpu().tolist()!r}")
        m, e = torch.frexp(t.detach().clamp_min(min_threshold))
        return torch.ldexp(torch.ones_like(t), e - (m == 0.5).to(e.dtype))


quant_math.register_namespace(TorchNamespace(), first=True)


class TorchOps:
    """The tensor operations of the framework-free training losses (gptq/training.py's GPTQOps) on torch
    tensors (channels first)."""
    channel_axis = 1
    square, sigmoid, abs, stack = (staticmethod(f) for f in (torch.square, torch.sigmoid, torch.abs, torch.stack))
    reshape, power, concat = (staticmethod(f) for f in (torch.reshape, torch.pow, torch.cat))

    def mean(self, x, axis=None):
        return x.mean() if axis is None else x.mean(axis)

    def sum(self, x, axis=None):
        return x.sum() if axis is None else x.sum(axis)

    def max(self, x):
        return x.max()

    def maximum(self, x, floor):
        return x.clamp_min(floor)

    def clip(self, x, low, high):
        return x.clamp(low, high)

    def like(self, x, other):
        return torch.as_tensor(x).to(other)

    def take(self, x, rows):
        return x[torch.as_tensor(rows, device=x.device)]

    def nbytes(self, x):
        return x.numel() * x.element_size()


OPS = TorchOps()
