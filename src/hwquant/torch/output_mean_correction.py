"""Empirical bias correction: shift each quantized layer's bias so that the mean of its output, per
channel, over the data, equals the float model's, measured in the quantized model itself.

Unlike the analytic correction (core/passes/bias_correction.py: ``(W - Q(W)) E[x]`` with the float
model's input mean), the measured mean error includes everything upstream: earlier layers' rounding
and the activation quantizers. Correcting a layer changes the inputs of every layer after it, so the
layers are corrected one at a time in graph order, each measured with the corrections before it in
place (correcting them all from one measurement overshoots: most of a deep layer's mean error comes
from the layers above it). One pass over the model does it: the data's values are carried forward
node by node, and each layer is measured (from its input to its observed tensor) and corrected before
the pass goes through it.

A layer observed at its own output is corrected exactly (up to the integer kernels' bias grid and
float rounding: the measurements run the fake-quantized float path): the bias shifts the output mean
one for one. Observed after a fused activation (GPTQ's interest points),
the mean there moves by less than the shift (a ReLU passes the share of positive inputs), so a
second, secant step follows: the channel's measured response to the first shift gives its slope.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import fx, nn

from hwquant.core.graph import Graph, Node
from hwquant.core.node_params import add_to_bias
from hwquant.torch.builder import QuantizerFactory, build_layer, build_module


def channel_axis(node: Node) -> int:
    """The channel axis of a linear layer's output: last for nn.Linear, 1 for convolutions."""
    return -1 if isinstance(node.call_target, nn.Linear) else 1


def channel_mean(t: torch.Tensor, axis: int) -> torch.Tensor:
    """Mean over every axis but ``axis`` (float64, so that long sums stay exact)."""
    t = t.detach().double()
    return t.movedim(axis, 0).reshape(t.shape[axis], -1).mean(1) if t.dim() > 1 else t.mean().reshape(1)


@torch.no_grad()
def channel_means(run: Callable[[List[torch.Tensor]], Sequence[torch.Tensor]], axes: Sequence[int],
                  samples: Sequence[torch.Tensor], batch_size: int) -> List[torch.Tensor]:
    """The channel means over all samples of each tensor ``run`` returns for a batch (one axis each),
    batch by batch."""
    n = len(samples[0])
    totals: List[Any] = [0.0] * len(axes)
    for i in range(0, n, batch_size):
        outs = run([s[i:i + batch_size] for s in samples])
        totals = [acc + channel_mean(t, axis) * len(t) for acc, axis, t in zip(totals, axes, outs)]
    return [total / n for total in totals]


class FakeQuantizers(QuantizerFactory):
    """The quantized model on the float path (fake-quantized kernels): the integer-kernel simulation
    gives the same means up to float rounding, several times slower on a CPU."""

    def input_scale(self, graph: Graph, node: Node) -> None:
        return None


class _Stream:
    """A built model run node by node over every batch of the data together: ``advance_to`` computes the
    nodes before a given one (keeping only values some later node still reads), ``probe`` the nodes
    from one to another without keeping them. A layer's submodule may be replaced between calls: so
    the layers are measured and corrected one after another in a single pass over the model."""

    def __init__(self, module: fx.GraphModule, batches: Sequence[Sequence[torch.Tensor]]):
        self.nodes = [n for n in module.graph.nodes if n.op != "output"]
        self.index = {n: i for i, n in enumerate(self.nodes)}
        # the position after which a value is no longer read (the model's output node does not count)
        self.last_read = {n: max([self.index[u] for u in n.users if u.op != "output"] + [i])
                          for i, n in enumerate(self.nodes)}
        self.runs = []
        for batch in batches:
            run = fx.Interpreter(module, garbage_collect_values=False)
            run.args_iter = iter(batch)
            self.runs.append(run)
        self.done = 0  # nodes before this position are computed

    @torch.no_grad()
    def advance_to(self, node: fx.Node) -> None:
        for i in range(self.done, self.index[node]):
            current = self.nodes[i]
            for run in self.runs:
                run.env[current] = run.run_node(current)
                for read in current.all_input_nodes + [current]:
                    if self.last_read[read] == i:
                        del run.env[read]
        self.done = max(self.done, self.index[node])

    @torch.no_grad()
    def probe(self, first: fx.Node, last: fx.Node, axis: int) -> torch.Tensor:
        """The channel means over all batches of ``last`` computed from ``first`` on (``first`` not yet
        computed), leaving the computed values as they were."""
        total, count = 0.0, 0
        nodes = self.nodes[self.index[first]:self.index[last] + 1]
        for run in self.runs:
            for current in nodes:
                run.env[current] = run.run_node(current)
            value = run.env[last]
            total, count = total + channel_mean(value, axis) * len(value), count + len(value)
            for current in nodes:
                del run.env[current]
        return (total / count).cpu()


def correct_output_means(graph: Graph, adapter: Any, float_means: Dict[str, torch.Tensor],
                         samples: Sequence[torch.Tensor], batch_size: int,
                         observed: Optional[Dict[str, str]] = None) -> List[str]:
    """Correct, in graph order, the bias of every layer named in ``float_means`` ({layer: the float
    model's channel means on ``samples`` of the node ``observed[layer]`` (default: the layer), taken
    before its activation quantizer}) so that the quantized model built from ``graph`` has those
    means there; a layer without a bias gets one. Writes the graph's nodes; returns the corrected layers."""
    layers = [node for node in graph if node.name in float_means and adapter.bias_attr(node) is not None]
    if not layers:
        return []
    point_of = {node.name: (observed or {}).get(node.name, node.name) for node in layers}
    quantizers = FakeQuantizers()
    model = build_module(graph, quantizers, extra_outputs=list(point_of.values()),
                         extra_outputs_unquantized=True).to(adapter.device).eval()
    output = next(n for n in model.graph.nodes if n.op == "output")
    point_nodes = dict(zip(point_of, output.args[0][1]))  # layer -> the fx node of its observed tensor
    placed = model.meta["hwquant_placement"]
    calls = {n.target: n for n in model.graph.nodes if n.op == "call_module"}
    n = len(samples[0])
    stream = _Stream(model, [[s[i:i + batch_size].to(adapter.device) for s in samples] for i in range(0, n, batch_size)])

    for node in layers:
        name = placed[node.name]["layer"]
        call, point, axis = calls[name], point_nodes[node.name], channel_axis(node)
        stream.advance_to(call)

        def shift_bias(shift: torch.Tensor) -> None:  # called within this iteration only: no stale loop variable
            add_to_bias(node, adapter, shift.numpy())  # noqa: B023
            setattr(model, name, build_layer(graph, node, quantizers).to(adapter.device).eval())  # noqa: B023

        target = float_means[node.name].cpu().double()
        measured = stream.probe(call, point, axis)
        shift = target - measured
        shift_bias(shift)
        if point_of[node.name] != node.name:  # through an activation the mean moves by less than the shift
            moved = stream.probe(call, point, axis)
            slope = ((moved - measured) / torch.where(shift.abs() > 1e-12, shift, torch.ones_like(shift))).clamp(0.1, 1.0)
            shift_bias((target - moved) / slope)
    return [node.name for node in layers]
