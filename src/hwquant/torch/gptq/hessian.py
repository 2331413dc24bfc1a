"""Hessian-based scores of the GPTQ interest points, for PyTorch: the vector-Jacobian products of
Hutchinson's estimator on the device, scored by gptq/hessian.py (what they estimate is said there)."""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from hwquant.gptq.hessian import HESSIAN_ITERATIONS, vjp_scores
from hwquant.logger import progress
from hwquant.torch.output_error import flat_tensors


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
                        total[:, i] += torch.from_numpy(vjp_scores(g.detach().float().cpu().numpy(), axis, per_channel)).to(total)
        scores.append(total / iterations)
    return torch.cat(scores)
