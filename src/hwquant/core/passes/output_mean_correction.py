"""Measured bias correction: shift each quantized layer's bias so that the mean of its output, per channel,
over the data, equals the float model's, measured in the quantized model itself (GPTQ's bias correction
after training, on both frameworks).

Unlike the analytic correction (passes/bias_correction.py: ``(W - Q(W)) E[x]`` with the float model's input
mean), the measured mean error includes everything upstream: earlier layers' rounding and the activation
quantizers. Correcting a layer changes the inputs of every layer after it, so the layers are corrected one
at a time in graph order, each measured with the corrections before it in place (correcting them all from
one measurement overshoots: most of a deep layer's mean error comes from the layers above it). One pass over
the model does it: the data's values are carried forward node by node (``NodeStream``), and each layer is
measured (from its input to its observed tensor) and corrected before the pass goes through it.

A layer observed at its own output is corrected exactly (up to float rounding): the bias shifts the output
mean one for one. Observed after a fused activation (GPTQ's interest points), the mean there moves by less
than the shift (a ReLU passes the share of positive inputs), so a second, secant step follows: the
channel's measured response to the first shift gives its slope.

The framework's part is one primitive, ``adapter.node_runner(graph)``: a node's output computed from its
inputs' values on the fake-quantized path (before and after its activation quantizer), a layer rebuilt once
its bias changed, and a tensor's per-channel mean.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence

import numpy as np

from hwquant.core.graph.model_graph import Graph, Node, NodeKind, map_input_refs
from hwquant.core.statistics.node_parameters import add_to_bias


class NodeRunner(Protocol):
    """What ``adapter.node_runner(graph)`` gives: the quantized model of ``graph`` run one node at a time."""

    def feed(self, value: Any) -> Any:
        """A slice of a model input as the framework's tensor, on the model's device."""

    def run(self, node: Node, args: Sequence[Any], kwargs: Dict[str, Any]) -> tuple:
        """(the node's output, the same after its activation quantizer) from its inputs' values (an input
        node: its value)."""

    def refresh(self, node: Node) -> None:
        """Rebuild the node's layer from the graph node (its weights changed)."""

    def channel_mean(self, value: Any, node: Node) -> np.ndarray:
        """The mean of ``value`` over every axis but ``node``'s output channel axis (float64)."""


class NodeStream:
    """The quantized model run node by node over every batch together: ``advance_to`` computes the nodes
    before a given one (keeping only values some later node still reads), ``probe`` the nodes from one to
    another without keeping them. A layer may be rebuilt between calls (``runner.refresh``)."""

    def __init__(self, graph: Graph, runner: NodeRunner, batches: Sequence[Sequence[Any]]):
        self.nodes, self.runner = list(graph), runner
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        inputs = [node.name for node in graph.input_nodes]
        self.input_position = {name: k for k, name in enumerate(inputs)}
        last = {node.name: i for i, node in enumerate(self.nodes)}
        for i, node in enumerate(self.nodes):
            for read in node.inputs:
                last[read] = max(last[read], i)
        self.last_read = last  # the position after which a value is no longer read
        self.batches = [list(b) for b in batches]
        self.envs: List[Dict[str, Any]] = [{} for _ in batches]
        self.done = 0  # nodes before this position are computed

    def _compute(self, node: Node, env: Dict[str, Any], batch: Sequence[Any]) -> tuple:
        if node.kind == NodeKind.INPUT:  # (an input may be quantized too)
            return self.runner.run(node, [self.runner.feed(batch[self.input_position[node.name]])], {})
        fill = lambda ref: env[node.inputs[ref.index]]  # noqa: E731
        return self.runner.run(node, map_input_refs(node.call_args, fill), map_input_refs(node.call_kwargs, fill))

    def advance_to(self, name: str) -> None:
        stop = self.index[name]
        for i in range(self.done, stop):
            node = self.nodes[i]
            for env, batch in zip(self.envs, self.batches):
                env[node.name] = self._compute(node, env, batch)[1]
                for read in [*node.inputs, node.name]:
                    if self.last_read[read] == i:
                        env.pop(read, None)
        self.done = max(self.done, stop)

    def probe(self, first: str, last: str) -> np.ndarray:
        """The channel means over all batches of ``last``'s output before its activation quantizer, computed
        from ``first`` on (``first`` not yet computed), leaving the computed values as they were."""
        total: Any = 0.0
        count = 0
        nodes = self.nodes[self.index[first]:self.index[last] + 1]
        for env, batch in zip(self.envs, self.batches):
            local = dict(env)
            for node in nodes:
                raw, local[node.name] = self._compute(node, local, batch)
            n = len(batch[0])
            total, count = total + self.runner.channel_mean(raw, self.nodes[self.index[first]]) * n, count + n
        return np.asarray(total / count, np.float64)


def correct_output_means(graph: Graph, adapter: Any, float_means: Dict[str, np.ndarray], samples: Sequence[Any],
                         batch_size: int, observed: Optional[Dict[str, str]] = None) -> List[str]:
    """Correct, in graph order, the bias of every layer named in ``float_means`` ({layer: the float model's
    channel means on ``samples`` of the node ``observed[layer]`` (default: the layer), taken before its
    activation quantizer}) so that the quantized model built from ``graph`` has those means there; a layer
    without a bias gets one. ``samples``: one array per model input. Writes the graph's nodes; returns the
    corrected layers."""
    layers = [node for node in graph if node.name in float_means and adapter.bias_attr(node) is not None]
    if not layers:
        return []
    point_of = {node.name: (observed or {}).get(node.name, node.name) for node in layers}
    runner = adapter.node_runner(graph)
    n = len(samples[0])
    stream = NodeStream(graph, runner, [[s[i:i + batch_size] for s in samples] for i in range(0, n, batch_size)])
    for node in layers:
        stream.advance_to(node.name)
        target = np.asarray(float_means[node.name], np.float64)
        measured = stream.probe(node.name, point_of[node.name])
        shift = target - measured
        add_to_bias(node, adapter, shift)
        runner.refresh(node)
        if point_of[node.name] != node.name:  # through an activation the mean moves by less than the shift
            moved = stream.probe(node.name, point_of[node.name])
            slope = np.clip((moved - measured) / np.where(np.abs(shift) > 1e-12, shift, 1.0), 0.1, 1.0)
            add_to_bias(node, adapter, (target - moved) / slope)
            runner.refresh(node)
    return [node.name for node in layers]
