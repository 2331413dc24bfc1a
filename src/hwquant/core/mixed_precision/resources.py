"""Resource utilization as a function of the candidate chosen at each configurable node, in the form
the integer program needs: every figure is the maximum over a few rows, and each row is a constant
plus terms ``coefficient * x[i, c]`` (node i takes candidate c) and, for BOPs whose kernel and input
bits are both configurable, ``coefficient * x[i, c] * x[j, d]``.

    weights memory     one row: sum of every node's weight bytes
    activation memory  one row per step of the schedule: the bytes of the tensors alive then
    total memory       weights row + each activation row
    BOPs               one row: MACs x kernel bits x input bits, per layer with a kernel

The figures are the same as ``core.resource_utilization`` computes (tests compare both).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hwquant.core.configuration.config import RUTarget
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.pipeline.resource_utilization import (activation_elements, bits_source, kernel_bits, kernel_macs, live_sets,
                                                        node_activation_bits, node_weights_bytes, padding_layers)

Var = Tuple[int, int]  # (configurable node index, candidate index)


@dataclass
class Row:
    constant: float = 0.0
    linear: Dict[Var, float] = field(default_factory=lambda: defaultdict(float))
    pairs: Dict[Tuple[Var, Var], float] = field(default_factory=lambda: defaultdict(float))

    def value(self, choice: Sequence[int]) -> float:
        chosen = lambda v: choice[v[0]] == v[1]  # noqa: E731
        return (self.constant + sum(c for v, c in self.linear.items() if chosen(v))
                + sum(c for (a, b), c in self.pairs.items() if chosen(a) and chosen(b)))

    def plus(self, other: "Row") -> "Row":
        row = Row(self.constant + other.constant)
        for src in (self, other):
            for v, c in src.linear.items():
                row.linear[v] += c
            for p, c in src.pairs.items():
                row.pairs[p] += c
        return row


class ResourceModel:
    """The rows of every resource figure over the configurable nodes' candidates."""

    def __init__(self, graph: Graph, configurable: Sequence[Node], kernel_axes: Callable, kernel_attr: Callable,
                 is_zero_padding: Optional[Callable[[Node], bool]] = None):
        """``is_zero_padding`` (the adapter's): zero paddings count as their layer's (resource_utilization.padding_layers)."""
        self.graph = graph
        paddings = padding_layers(graph, is_zero_padding, kernel_axes) if is_zero_padding is not None else {}
        self.nodes = list(configurable)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        weights = Row()
        for node in graph:
            self._add(weights, node, lambda cfg, n=node: node_weights_bytes(n, cfg))
        activation = []
        for step in live_sets(graph, paddings):
            row = Row()
            for node in step:
                source = bits_source(graph, node, paddings)
                size = activation_elements(node) / 8
                self._add(row, source, lambda cfg, s=size: s * node_activation_bits(cfg))
            activation.append(row)
        bops = Row()
        for node in graph:
            km = kernel_macs(node, kernel_axes, kernel_attr)
            if km is not None:
                self._add_product(bops, node, bits_source(graph, graph.node(node.inputs[0]), paddings), km[0], km[1])
        self.rows: Dict[RUTarget, List[Row]] = {RUTarget.WEIGHTS: [weights], RUTarget.ACTIVATION: activation,
                     RUTarget.TOTAL: [weights.plus(r) for r in activation] or [weights], RUTarget.BOPS: [bops]}

    def _options(self, node: Node):
        """[(var or None, config)] of a node: one entry per candidate if configurable, else its only config."""
        if node.name in self.index:
            i = self.index[node.name]
            return [((i, c), cfg) for c, cfg in enumerate(node.candidates)]
        return [(None, node.candidates[0] if node.candidates else None)]

    def _add(self, row: Row, node: Node, cost: Callable) -> None:
        for var, cfg in self._options(node):
            if var is None:
                row.constant += cost(cfg)
            else:
                row.linear[var] += cost(cfg)

    def _add_product(self, row: Row, node: Node, source: Node, attr: str, macs: float) -> None:
        for var_k, cfg_k in self._options(node):
            for var_a, cfg_a in self._options(source):
                cost = macs * kernel_bits(cfg_k, attr) * node_activation_bits(cfg_a)
                if var_k is None and var_a is None:
                    row.constant += cost
                elif var_k is None or var_a is None or var_k[0] == var_a[0]:
                    if var_k is not None and var_a is not None and var_k[1] != var_a[1]:
                        continue  # one node cannot take two candidates
                    row.linear[var_k or var_a] += cost
                else:
                    row.pairs[(var_k, var_a)] += cost

    def value(self, target: RUTarget, choice: Sequence[int]) -> float:
        return max(r.value(choice) for r in self.rows[target])

    def figures(self, choice: Sequence[int]) -> Dict[RUTarget, float]:
        return {t: self.value(t, choice) for t in self.rows}
