"""Batch summaries computed with torch (on the tensor's device, multi-threaded, whatever its
memory format), for the framework-free TensorStatistics."""
from __future__ import annotations

import math

import torch

from hwquant.core.statistics import BatchSummary, TensorStatistics


def _flat_values(t: torch.Tensor) -> torch.Tensor:
    """All values as a 1-D view in memory order (no copy for contiguous or channels-last tensors);
    the order does not matter to a histogram."""
    if t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)):
        return t.as_strided((t.numel(),), (1,), t.storage_offset())
    return t.reshape(-1)


@torch.no_grad()
def summarize_tensor(t: torch.Tensor, stats: TensorStatistics) -> BatchSummary:
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.float()
    n = t.numel()
    if n == 0:
        return BatchSummary(0, math.inf, -math.inf, 0.0, 0.0, t.new_zeros(0).cpu().numpy(), shape=tuple(t.shape))
    channel = None
    if stats.per_channel:
        if t.dim() == 0 or not -t.dim() <= stats.channel_axis < t.dim():
            raise ValueError(f"channel_axis {stats.channel_axis} is out of range for an activation of shape "
                             f"{tuple(t.shape)}")
        axis = stats.channel_axis % t.dim()
        dims = [d for d in range(t.dim()) if d != axis]
        channel = (t.amin(dims), t.amax(dims), t.sum(dims, dtype=torch.float64))
        lo, hi = channel[0].min().item(), channel[1].max().item()
    else:
        lo_t, hi_t = torch.aminmax(t)
        lo, hi = lo_t.item(), hi_t.item()
    if not (math.isfinite(lo) and math.isfinite(hi)):  # TensorStatistics.add reports it
        return BatchSummary(n, lo, hi, 0.0, 0.0, t.new_zeros(0).cpu().numpy(), shape=tuple(t.shape))
    var, mean = torch.var_mean(t, correction=0)
    flat = _flat_values(t)
    idx = stats.sample_indices(n)
    sample = flat if idx is None else flat[torch.from_numpy(idx).to(t.device)]
    summary = BatchSummary(n, lo, hi, mean.item(), var.item() * n, sample.cpu().numpy(), shape=tuple(t.shape))
    if channel is not None:
        summary.channel_min, summary.channel_max, summary.channel_sum = (c.cpu().double().numpy() for c in channel)
    return summary
