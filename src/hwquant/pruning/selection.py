"""Which channels to remove, framework-free (numpy): channels in SIMD groups of the target, what each
section's channel costs in weights, and the greedy choice of groups under a weights-memory target."""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from hwquant.core.graph import Graph
from hwquant.pruning.sections import Section


def simd_groups(scores: np.ndarray, simd: int) -> List[np.ndarray]:
    """Channel indices grouped as the hardware computes them: sorted by score, most important first, in
    groups of ``simd`` (the last one may be smaller). A group is kept or removed whole."""
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    return [order[i:i + simd] for i in range(0, len(order), max(int(simd), 1))]


def magnitude_scores(kernel: np.ndarray, out_axis: int) -> np.ndarray:
    """Each output channel's squared L2 norm (the cheap metric)."""
    moved = np.moveaxis(np.asarray(kernel, np.float64), out_axis, 0)
    return np.square(moved.reshape(moved.shape[0], -1)).sum(1)


def params_per_channel(graph: Graph, adapter: Any, section: Section) -> int:
    """The weights one channel of a section holds: its slice of the entry's kernel and bias, of each channel-wise
    layer's parameters, and of the exit's kernel (the input channel)."""
    entry, exit_ = graph.node(section.entry), graph.node(section.exit)
    kernel = np.asarray(entry.weights[adapter.kernel_attr(entry)])
    out_axis = adapter.kernel_axes(entry)[0]
    channels = kernel.shape[out_axis]
    total = kernel.size // channels + (1 if adapter.bias_attr(entry) in entry.weights else 0)
    for name in section.channel_wise:
        total += sum(np.size(w) for w in graph.node(name).weights.values()) // channels
    exit_kernel = np.asarray(exit_.weights[adapter.kernel_attr(exit_)])
    total += exit_kernel.size // exit_kernel.shape[adapter.kernel_axes(exit_)[1]]
    return int(total)


def greedy_kept_groups(group_scores: Dict[str, np.ndarray], group_params: Dict[str, np.ndarray], total_params: float,
                       target_params: float) -> Dict[str, int]:
    """How many groups each section keeps (its most important first): the groups that cost least importance per
    parameter saved are removed first, until the parameters left are at most ``target_params``; every section
    keeps its first group. Raises ValueError naming the smallest reachable count when the target cannot be met."""
    kept = {s: len(g) for s, g in group_scores.items()}
    floor = total_params - sum(float(np.sum(group_params[s][1:])) for s in group_scores)
    if floor > target_params:
        raise ValueError(f"the smallest model pruning can reach holds {floor:.0f} parameters (every prunable section "
                         f"kept at one group), above the target's {target_params:.0f}")
    left = total_params
    while left > target_params:
        # each section's next candidate is its least important remaining group (the last kept)
        candidates = [(float(group_scores[s][kept[s] - 1]) / max(float(group_params[s][kept[s] - 1]), 1e-12), s)
                      for s in kept if kept[s] > 1]
        _, section = min(candidates)
        kept[section] -= 1
        left -= float(group_params[section][kept[section]])
    return kept
