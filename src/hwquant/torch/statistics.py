"""Batch summaries computed with torch (on the tensor's device, multi-threaded), for the
framework-free TensorStatistics.

Per-channel figures are reduced along the rows of a (values, channels) matrix: a free view of
channels-last activations (what the observing model produces on CPU) and of (batch, features)
outputs. The spread comes from the sum of squares (one norm over the raw memory), which is all
the z-score outlier removal needs.
"""
from __future__ import annotations

import math

import torch

from hwquant.core.statistics.tensor_statistics import BatchSummary, TensorStatistics


def _rows_by_channel(t: torch.Tensor, axis: int) -> torch.Tensor:
    """A (values, channels) matrix of `t` with channels along `axis` (a view when the layout allows)."""
    if t.dim() == 4 and axis == 1 and t.is_contiguous(memory_format=torch.channels_last):
        return t.permute(0, 2, 3, 1).reshape(-1, t.shape[1])
    return t.movedim(axis, -1).reshape(-1, t.shape[axis])


def _column_reduce(rows: torch.Tensor, op) -> torch.Tensor:
    """op (torch.amin / torch.amax) down the columns of a (values, channels) matrix. Few columns
    vectorise badly (a 10-channel activation reduces 50x slower than a 64-channel one), so k rows
    are laid side by side first, making k * channels a multiple of 64, and the k partial results
    reduced after: the same values, exactly."""
    m, c = rows.shape
    k = 64 // math.gcd(c, 64)
    whole = (m // k) * k
    if k == 1 or whole == 0:
        return op(rows, 0)
    out = op(op(rows[:whole].reshape(whole // k, k * c), 0).reshape(k, c), 0)
    if whole < m:
        out = op(torch.stack([out, op(rows[whole:], 0)]), 0)
    return out


def _flat_values(t: torch.Tensor) -> torch.Tensor:
    """All values as a 1-D view in memory order (the order does not matter to a histogram)."""
    if t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)):
        return t.as_strided((t.numel(),), (1,), t.storage_offset())
    return t.reshape(-1)


@torch.no_grad()
def summarize_tensor(t: torch.Tensor, stats: TensorStatistics) -> BatchSummary:
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.float()
    n, shape = t.numel(), tuple(t.shape)
    empty = t.new_zeros(0).cpu().numpy()
    if n == 0:
        return BatchSummary(0, math.inf, -math.inf, 0.0, 0.0, empty, shape=shape)
    flat = _flat_values(t)
    if stats.per_channel:
        if t.dim() == 0 or not -t.dim() <= stats.channel_axis < t.dim():
            raise ValueError(f"channel_axis {stats.channel_axis} is out of range for an activation of shape {shape}")
        rows = _rows_by_channel(t, stats.channel_axis % t.dim())
        # (single-axis reductions along the rows are the fast path for any layout)
        c_min, c_max = _column_reduce(rows, torch.amin), _column_reduce(rows, torch.amax)
        c_sum = rows.sum(0, dtype=torch.float32)
        lo, hi, total = c_min.min().item(), c_max.max().item(), c_sum.double().sum().item()
    else:
        lo_t, hi_t = torch.aminmax(flat)
        lo, hi, total = lo_t.item(), hi_t.item(), flat.sum().item()
    if not (math.isfinite(lo) and math.isfinite(hi)):  # TensorStatistics.add reports it
        return BatchSummary(n, lo, hi, 0.0, 0.0, empty, shape=shape)
    mean = total / n
    sum_sq = float(torch.dot(flat, flat))  # float32 BLAS: ~1e-3 relative, ample for z-scores
    m2 = max(sum_sq - n * mean * mean, 0.0)
    idx = stats.sample_indices(n)
    sample = flat if idx is None else flat[torch.from_numpy(idx).to(t.device)]
    summary = BatchSummary(n, lo, hi, mean, m2, sample.cpu().numpy(), shape=shape)
    if stats.per_channel:
        summary.channel_min, summary.channel_max, summary.channel_sum = (
            c.double().cpu().numpy() for c in (c_min, c_max, c_sum))
    return summary
