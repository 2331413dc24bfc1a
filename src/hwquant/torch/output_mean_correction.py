"""Empirical bias correction: shift each quantized layer's bias so that the mean of its output, per
channel, over the data, equals the float model's, measured in the quantized model itself.

Unlike the analytic correction (core/passes/bias_correction.py: ``(W - Q(W)) E[x]`` with the float
model's input mean), the measured mean error includes everything upstream: earlier layers' rounding
and the activation quantizers. Correcting a layer changes the inputs of every layer after it, so the
layers are corrected one at a time in graph order, each measured with the corrections before it in
place (correcting them all from one measurement overshoots: most of a deep layer's mean error comes
from the layers above it). Each measurement runs the model only as far as the layer.

A layer observed at its own output is corrected exactly (up to the integer kernels' bias grid and
float rounding: the measurements run the fake-quantized float path): the bias shifts the output mean
one for one. Observed after a fused activation (GPTQ's interest points),
the mean there moves by less than the shift (a ReLU passes the share of positive inputs), so a
second, secant step follows: the channel's measured response to the first shift gives its slope.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import fx, nn

from hwquant.core.graph import Graph, Node
from hwquant.torch.builder import QuantizerFactory, build_module


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


def _prefix(module: fx.GraphModule, point: int) -> fx.GraphModule:
    """The part of a model built with extra outputs that computes its ``point``-th extra output only."""
    pruned = fx.GraphModule(module, copy.deepcopy(module.graph))
    output = next(n for n in reversed(pruned.graph.nodes) if n.op == "output")
    output.args = (output.args[0][1][point],)
    pruned.graph.eliminate_dead_code()
    pruned.recompile()
    return pruned


def _add_to_bias(node: Node, adapter: Any, shift: torch.Tensor) -> None:
    from hwquant.core.pipeline import set_bias  # the pipeline imports the torch adapter
    bias = node.weights.get(adapter.bias_attr(node))
    shift = shift.numpy()
    set_bias(node, adapter, shift if bias is None else bias + shift)


def correct_output_means(graph: Graph, adapter: Any, float_means: Dict[str, torch.Tensor],
                         samples: Sequence[torch.Tensor], batch_size: int,
                         observed: Optional[Dict[str, str]] = None) -> List[str]:
    """Correct, in graph order, the bias of every layer named in ``float_means`` ({layer: the float
    model's channel means on ``samples`` of the node ``observed[layer]`` (default: the layer), taken
    before its activation quantizer}) so that the quantized model built from ``graph`` has those
    means there; a layer without a bias gets one. Writes the graph's nodes; returns the corrected layers."""
    corrected = []
    for node in graph:
        if node.name not in float_means or adapter.bias_attr(node) is None:
            continue
        point = (observed or {}).get(node.name, node.name)

        def measure() -> torch.Tensor:
            model = build_module(graph, FakeQuantizers(), extra_outputs=[point], extra_outputs_unquantized=True)
            prefix = _prefix(model, 0).to(adapter.device).eval()
            return channel_means(lambda x: [prefix(*x)], [channel_axis(node)], samples, batch_size)[0].cpu()

        target = float_means[node.name].cpu().double()
        measured = measure()
        shift = target - measured
        _add_to_bias(node, adapter, shift)
        if point != node.name:  # through an activation the mean moves by less than the shift
            moved = measure()
            slope = ((moved - measured) / torch.where(shift.abs() > 1e-12, shift, torch.ones_like(shift))).clamp(0.1, 1.0)
            _add_to_bias(node, adapter, (target - moved) / slope)
        corrected.append(node.name)
    return corrected
