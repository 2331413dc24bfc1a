"""Hessian-based scores of the GPTQ interest points, for PyTorch.

The score of an activation ``a`` for one sample approximates the trace of the Gauss-Newton Hessian of
the model output ``y`` with respect to ``a``: ``E_v ||J^T v||^2`` with ``J = dy/da`` and Rademacher
vectors ``v`` (Hutchinson's estimator): how much an error at ``a`` moves the output. One backward
pass per random vector gives the vector-Jacobian products of every interest point at once.

Per point and sample: the sum over the tensor (``per_channel=False``), or, for sample-layer attention,
the largest over channels of the mean over the other axes (``per_channel=True``).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from hwquant.logger import progress
from hwquant.torch.output_error import flat_tensors

HESSIAN_ITERATIONS = 32  # random vectors per batch (the estimate's relative spread falls as 1 / sqrt)


def _score(g: torch.Tensor, channel_axis: int, per_channel: bool) -> torch.Tensor:
    g2 = g.detach().float().pow(2)
    if g2.dim() == 1:
        return g2
    if not per_channel:
        return g2.flatten(1).sum(1)
    axis = channel_axis % g2.dim()
    if axis == 0:
        return g2.flatten(1).max(1).values
    g2 = g2.movedim(axis, 1)
    g2 = g2.flatten(2).mean(2) if g2.dim() > 2 else g2  # (batch, channels)
    return g2.max(1).values


def activation_hessian_scores(model: torch.nn.Module, batches: Iterable[Sequence[torch.Tensor]],
                              channel_axes: Sequence[int], per_channel: bool,
                              iterations: int = HESSIAN_ITERATIONS, seed: int = 0) -> torch.Tensor:
    """Scores of shape (samples, points) for the float ``model`` returning ``(outputs, [points])``."""
    gen = None
    scores = []
    for inputs in progress(list(batches), "Hessian scores of the GPTQ interest points"):
        inputs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        with torch.enable_grad():
            outputs, points = model(*inputs)
            out = torch.cat([t.flatten(1) if t.dim() > 1 else t[:, None] for t in flat_tensors(outputs)
                             if t.is_floating_point()], 1)
            if gen is None or gen.device != out.device:
                gen = torch.Generator(device=out.device).manual_seed(seed)
            total = torch.zeros(out.shape[0], len(points), device=out.device)
            for _ in range(iterations):
                v = torch.randint(0, 2, out.shape, generator=gen, device=out.device).to(out.dtype) * 2 - 1
                grads = torch.autograd.grad((out * v).sum(), points, retain_graph=True, allow_unused=True)
                for i, (g, axis) in enumerate(zip(grads, channel_axes)):
                    if g is not None:  # a point the output does not depend on scores 0
                        total[:, i] += _score(g, axis, per_channel)
        scores.append(total / iterations)
    return torch.cat(scores)
