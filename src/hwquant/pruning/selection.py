"""Which channels to remove, framework-free (numpy): channels in SIMD groups of the target, the model's
weights counted exactly for any choice of kept channels, and the greedy choice of groups under a
weights-memory target.

The count is MCT's pruning memory: every weight of the float model, 4 bytes each (the pruned model is a
float model, to be fine-tuned and quantized after), and where the TPC pads channels to its SIMD width
(``is_simd_padding``), each layer's weights counted with its output channels rounded up to that width."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from hwquant.core.graph.model_graph import Graph, Node
from hwquant.pruning.sections import Section, is_kernel_layer

FLOAT32_BYTES = 4  # per weight of the (float) pruned model: MCT's pruning memory


def simd_groups(scores: np.ndarray, simd: int) -> List[np.ndarray]:
    """Channel indices grouped as the hardware computes them: sorted by score, most important first, in
    groups of ``simd`` (the last one may be smaller). A group is kept or removed whole."""
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    return [order[i:i + simd] for i in range(0, len(order), max(int(simd), 1))]


@dataclass
class _LayerWeights:
    """One layer's weights as a function of the channels kept around it."""
    attrs: List[Tuple[int, bool, bool]]   # (size, scales with its output channels, scales with its inputs)
    out_channels: Optional[int]           # None: not padded (no channel count its weights divide into)
    simd: int
    out_section: Optional[int] = None     # the section whose channels are this layer's outputs
    in_section: Optional[int] = None      # the section whose channels are this layer's inputs


class WeightsCount:
    """The model's weights for any number of channels kept per section (exact: a layer between two sections
    loses input and output channels at once)."""

    def __init__(self, graph: Graph, adapter: Any, sections: Sequence[Section], simd: Dict[str, int],
                 pad_to_simd: bool):
        self.sections = list(sections)
        self.pad_to_simd = pad_to_simd
        self.full = [s.channels for s in self.sections]
        self.layers: Dict[str, _LayerWeights] = {}
        role_out = {n: i for i, s in enumerate(self.sections) for n in (s.entry, *s.channel_wise)}
        role_in = {s.exit: i for i, s in enumerate(self.sections)}
        for node in graph:
            if node.weights:
                self.layers[node.name] = self._layer(node, adapter, simd.get(node.name, 1),
                                                     role_out.get(node.name), role_in.get(node.name))
        self.touched = [[n for n in (s.entry, *s.channel_wise, s.exit) if n in self.layers] for s in self.sections]

    def _layer(self, node: Node, adapter: Any, simd: int, out_section: Optional[int],
               in_section: Optional[int]) -> _LayerWeights:
        kernel_attr = adapter.kernel_attr(node) if is_kernel_layer(node, adapter) else None
        channels = self.full[out_section] if out_section is not None else _out_channels(node, adapter)
        attrs = []
        for attr, value in node.weights.items():
            size = int(np.size(value))
            if attr == kernel_attr:
                attrs.append((size, out_section is not None, in_section is not None))
            else:  # a bias, a batch norm's or a depthwise kernel's per-channel weights; scalars stay
                per_channel = channels is not None and size % channels == 0 and size >= channels
                attrs.append((size, out_section is not None and per_channel, False))
        total = sum(a[0] for a in attrs)
        padded = channels if channels and total % channels == 0 else None
        return _LayerWeights(attrs, padded, max(int(simd), 1), out_section, in_section)

    def layer_params(self, name: str, kept: Sequence[int]) -> float:
        layer = self.layers[name]
        out_ratio = kept[layer.out_section] / self.full[layer.out_section] if layer.out_section is not None else 1.0
        in_ratio = kept[layer.in_section] / self.full[layer.in_section] if layer.in_section is not None else 1.0
        params = sum(size * (out_ratio if by_out else 1.0) * (in_ratio if by_in else 1.0)
                     for size, by_out, by_in in layer.attrs)
        if self.pad_to_simd and layer.out_channels:
            channels = round(layer.out_channels * out_ratio)
            if channels:
                params *= np.ceil(channels / layer.simd) * layer.simd / channels
        return float(params)

    def total(self, kept: Sequence[int]) -> float:
        return sum(self.layer_params(name, kept) for name in self.layers)

    def saving(self, kept: Sequence[int], section: int, new: int) -> float:
        """Weights saved when ``section`` keeps ``new`` channels instead of ``kept[section]``."""
        changed = list(kept)
        changed[section] = new
        return sum(self.layer_params(n, kept) - self.layer_params(n, changed) for n in self.touched[section])


def _out_channels(node: Node, adapter: Any) -> Optional[int]:
    axes = adapter.kernel_axes(node)
    if axes is not None and adapter.kernel_attr(node) in node.weights:
        return int(np.shape(node.weights[adapter.kernel_attr(node)])[axes[0]])
    shape = node.output_shape
    if isinstance(shape, tuple) and len(shape) >= 2 and isinstance(shape[adapter.activation_channel_axis], int):
        return int(shape[adapter.activation_channel_axis])
    return None


class UnreachableTarget(ValueError):
    def __init__(self, smallest: float):
        super().__init__(f"the smallest model pruning can reach holds {smallest:.0f} weights")
        self.smallest = smallest


def greedy_kept_groups(group_scores: Sequence[np.ndarray], group_sizes: Sequence[np.ndarray], count: WeightsCount,
                       target_params: float, least_kept: Optional[Sequence[int]] = None) -> List[int]:
    """How many groups each section keeps (its most important first). The group that costs least importance per
    weight it saves goes first, until at most ``target_params`` weights are left; then removed groups that fit
    again are put back, most important per weight first. Every section keeps its first group, or
    ``least_kept[s]`` groups. Raises UnreachableTarget (with the smallest reachable count) when the target cannot
    be met."""
    n_groups = [len(g) for g in group_scores]
    least = [max(1, min(n, int(k))) for n, k in zip(n_groups, least_kept or [1] * len(n_groups))]
    channels = [np.concatenate([[0], np.cumsum(sizes)]).astype(int) for sizes in group_sizes]  # kept groups -> channels
    floor = count.total([c[k] for c, k in zip(channels, least)])
    if floor > target_params:
        raise UnreachableTarget(floor)
    kept = list(n_groups)
    kept_channels = [c[-1] for c in channels]
    left = count.total(kept_channels)
    removed: List[int] = []
    while left > target_params:
        best: Optional[Tuple[float, int, float]] = None
        for s in range(len(kept)):
            if kept[s] <= least[s]:
                continue
            saved = count.saving(kept_channels, s, channels[s][kept[s] - 1])
            if saved <= 0:
                continue
            ratio = float(group_scores[s][kept[s] - 1]) / saved
            if best is None or ratio < best[0]:
                best = (ratio, s, saved)
        if best is None:  # (the floor was checked: only groups that save nothing are left)
            break
        _, s, saved = best
        kept[s] -= 1
        kept_channels[s] = channels[s][kept[s]]
        left -= saved
        removed.append(s)
    # the last removal may have overshot: put back what fits, most important per weight first
    while True:
        best = None
        for s in set(removed):
            if kept[s] >= n_groups[s]:
                continue
            cost = -count.saving(kept_channels, s, channels[s][kept[s] + 1])
            if cost > 0 and left + cost <= target_params:
                ratio = float(group_scores[s][kept[s]]) / cost
                if best is None or ratio > best[0]:
                    best = (ratio, s, cost)
        if best is None:
            return kept
        _, s, cost = best
        kept[s] += 1
        kept_channels[s] = channels[s][kept[s]]
        left += cost
