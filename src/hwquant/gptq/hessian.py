"""Hessian-based scores of the GPTQ interest points, the framework-free part.

The score of an activation ``a`` for one sample approximates the trace of the Gauss-Newton Hessian of
the model output ``y`` with respect to ``a``: ``E_v ||J^T v||^2`` with ``J = dy/da`` and Rademacher
vectors ``v`` (Hutchinson's estimator): how much an error at ``a`` moves the output. A framework runs
the vector-Jacobian products (one backward pass per random vector gives every interest point's); this
module turns each into per-sample scores.

Per point and sample: the sum over the tensor (``per_channel=False``), or, for sample-layer attention,
the largest over channels of the mean over the other axes (``per_channel=True``).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, List, Sequence

import numpy as np

from hwquant.logger import progress

HESSIAN_ITERATIONS = 32  # random vectors per batch (the estimate's relative spread falls as 1 / sqrt)


def rademacher(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """A random vector of +-1 (float32)."""
    return (rng.integers(0, 2, shape) * 2 - 1).astype(np.float32)


def vjp_scores(g: np.ndarray, channel_axis: int, per_channel: bool) -> np.ndarray:
    """Per-sample scores (batch,) of one vector-Jacobian product ``g`` (batch first)."""
    g2 = np.square(np.asarray(g, np.float32))
    if g2.ndim == 1:
        return g2
    if not per_channel:
        return g2.reshape(len(g2), -1).sum(1)
    axis = channel_axis % g2.ndim
    if axis == 0:
        return g2.reshape(len(g2), -1).max(1)
    g2 = np.moveaxis(g2, axis, 1)
    g2 = g2.reshape(g2.shape[0], g2.shape[1], -1).mean(2) if g2.ndim > 2 else g2  # (batch, channels)
    return g2.max(1)


def probed_scores(batches: Iterable[List[Any]], probe_gradients: Callable[[List[Any]], Iterable[Sequence[Any]]],
                  channel_axes: Sequence[int], per_channel: bool) -> np.ndarray:
    """(samples, points) scores over ``batches``: ``probe_gradients(batch)`` gives, per random vector, the
    vector-Jacobian product at every point as a numpy array (None: a point the output does not depend on,
    scored 0); each point's scores are averaged over the vectors."""
    scores = []
    for batch in progress(list(batches), "Hessian scores of the GPTQ interest points"):
        total, probes = np.zeros((len(batch[0]), len(channel_axes))), 0
        for grads in probe_gradients(batch):
            probes += 1
            for j, (g, axis) in enumerate(zip(grads, channel_axes)):
                if g is not None:
                    total[:, j] += vjp_scores(g, axis, per_channel)
        scores.append(total / max(probes, 1))
    return np.concatenate(scores)
