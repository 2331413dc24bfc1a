"""Move a bounded ReLU's bound to a power of two (MCT's `relu_bound_to_power_of_2`).

A power-of-two activation quantizer after ReLU6 gets threshold 8 and leaves [6, 8) unused. For
`linear1 -> ReLU6 (or hardtanh(0, M), M not a power of two) -> linear2`, with
s = M / 8: linear1's kernel and bias are divided by s, the activation becomes hardtanh(0, 8), and
linear2's kernel is multiplied by s. Because min(max(x / s, 0), 8) == min(max(x, 0), M) / s, the
model is unchanged and the activation fills the power-of-two range [0, 8). (MCT scales the first
layer up and the second down, always to the bound 8 = RELU_POT_BOUND.)

Only where linear1's output feeds the activation alone and the activation feeds linear2 alone.
Runs in `prepare`, after batch-norm folding, before the candidates are assigned (the activation
changes operator set, ReLU6 -> HardTanh).
"""
from __future__ import annotations

import math

from hwquant.core.graph.framework_adapter import FrameworkAdapter
from hwquant.core.graph.model_graph import Graph
from hwquant.core.passes.linear_collapsing import single_reader

RELU_POT_BOUND = 8.0


def bound_relus_to_power_of_2(graph: Graph, adapter: FrameworkAdapter) -> int:
    """Rescale every matching linear -> bounded ReLU -> linear; returns how many activations were
    changed. Apply when QuantizationConfig.relu_bound_to_power_of_2 is set."""
    changed = 0
    for act in graph:
        info = adapter.activation_info(act)
        if info is None or info.name not in ("relu6", "hardtanh") or info.lower != 0 or info.upper is None \
                or not math.isfinite(info.upper) or info.upper <= 0 or math.frexp(info.upper)[0] == 0.5 \
                or len(act.inputs) != 1:  # (a mantissa of 0.5: already a power of two)
            continue
        first = graph.node(act.inputs[0])
        second = single_reader(graph, act)
        if single_reader(graph, first) is not act or second is None or second.inputs != [act.name]:
            continue
        if adapter.linear_geometry(first) is None or adapter.linear_geometry(second) is None:
            continue
        k1, b1, k2 = adapter.kernel_attr(first), adapter.bias_attr(first), adapter.kernel_attr(second)
        if k1 not in first.weights or k2 not in second.weights:
            continue
        scale = info.upper / RELU_POT_BOUND
        first.set_weight(k1, (first.weights[k1] / scale).astype(first.weights[k1].dtype))
        if b1 is not None and b1 in first.weights:
            first.set_weight(b1, (first.weights[b1] / scale).astype(first.weights[b1].dtype))
        second.set_weight(k2, (second.weights[k2] * scale).astype(second.weights[k2].dtype))
        adapter.set_activation_bounds(act, 0.0, RELU_POT_BOUND)
        changed += 1
    return changed
