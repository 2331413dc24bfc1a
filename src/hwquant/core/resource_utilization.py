"""Resource utilization of a quantized graph: weights memory, activation memory, total memory and
bit-operations (BOPs), for the final configs or for any choice of candidates.

- Weights memory (bytes): every weight tensor of the model at its bit width (quantized attributes
  at their n_bits, the rest, such as float biases, at 32 bits).
- Activation memory (bytes, one sample): the peak, over the execution schedule (the graph's
  topological order), of the activation tensors alive at once. A tensor lives from the node that
  produces it until its last reader has run; its size is its elements times its bit width (the
  node's activation bits when quantized, 32 bits otherwise; quantization-preserving nodes keep
  their input's width).
- Total memory: weights + activation memory.
- BOPs: for each layer with a kernel, multiply-accumulates x kernel bits x input activation bits.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional

import numpy as np

from hwquant.constants import FLOAT_BITWIDTH
from hwquant.core.config import ResourceUtilization
from hwquant.core.graph import Graph, Node, NodeKind
from hwquant.core.node_config import NodeQuantizationConfig

ConfigOf = Callable[[Node], Optional[NodeQuantizationConfig]]


def final_config(node: Node) -> Optional[NodeQuantizationConfig]:
    return node.final_config


def max_bits_config(node: Node) -> Optional[NodeQuantizationConfig]:
    """The candidate with the most bits (the maximal figures a node can cost)."""
    if not node.candidates:
        return None
    return max(node.candidates, key=lambda c: (c.activation_quantization_cfg.activation_n_bits,
                                               sum(c.bit_widths()[1].values())))


def _elements(shape) -> int:
    if shape is None or (isinstance(shape, list)):
        return 0 if shape is None else sum(_elements(s) for s in shape)
    return int(np.prod(shape[1:])) if len(shape) > 0 else 1  # per sample: drop the batch dimension


def activation_bits(graph: Graph, config_of: ConfigOf) -> Dict[str, int]:
    """The bit width of each node's output tensor."""
    bits: Dict[str, int] = {}
    for node in graph:
        cfg = config_of(node)
        a = cfg.activation_quantization_cfg if cfg else None
        if a is not None and a.quantization_preserving and node.inputs:
            bits[node.name] = bits[node.inputs[0]]
        elif a is not None and a.enable_activation_quantization:
            bits[node.name] = a.activation_n_bits
        else:
            bits[node.name] = FLOAT_BITWIDTH
    return bits


def weights_memory(graph: Graph, config_of: ConfigOf) -> float:
    total = 0.0
    for node in graph:
        cfg = config_of(node)
        attrs = cfg.weights_quantization_cfg.attrs if cfg else {}
        for key, w in node.weights.items():
            if node.kind == NodeKind.MODULE and key in ("running_mean", "running_var", "num_batches_tracked"):
                continue
            wc = attrs.get(key)
            bits = wc.weights_n_bits if wc is not None and wc.enable_weights_quantization else FLOAT_BITWIDTH
            total += w.size * bits / 8
    return total


def activation_memory(graph: Graph, config_of: ConfigOf) -> float:
    bits = activation_bits(graph, config_of)
    nodes = list(graph)
    last_use = {n.name: i for i, n in enumerate(nodes)}
    for i, n in enumerate(nodes):
        for src in n.inputs:
            last_use[src] = max(last_use[src], i)
    for out in graph.output_names():
        last_use[out] = len(nodes)
    live: Dict[str, float] = {}
    peak = 0.0
    for i, n in enumerate(nodes):
        if n.kind != NodeKind.CONSTANT:
            live[n.name] = _elements(n.output_shape) * bits[n.name] / 8
        peak = max(peak, sum(live.values()))
        for name in [k for k in live if last_use[k] <= i]:
            del live[name]
    return peak


def bops(graph: Graph, config_of: ConfigOf, kernel_axes: Callable[[Node], Optional[tuple]],
         kernel_attr: Callable[[Node], Optional[str]]) -> float:
    """Multiply-accumulates x kernel bits x input bits; MACs per output element = kernel size / output
    channels (exact for convolutions and linear layers, an upper bound for strided transposed ones)."""
    bits = activation_bits(graph, config_of)
    total = 0.0
    for node in graph:
        attr, axes = kernel_attr(node), kernel_axes(node)
        if attr is None or axes is None or attr not in node.weights or not node.inputs:
            continue
        cfg = config_of(node)
        wc = cfg.weights_quantization_cfg.attrs.get(attr) if cfg else None
        w_bits = wc.weights_n_bits if wc is not None and wc.enable_weights_quantization else FLOAT_BITWIDTH
        w = node.weights[attr]
        macs = _elements(node.output_shape) * w.size / w.shape[axes[0]]
        total += macs * w_bits * bits[node.inputs[0]]
    return total


def compute_resource_utilization(graph: Graph, config_of: ConfigOf, adapter) -> ResourceUtilization:
    """All four figures; `adapter` (the framework adapter) says where kernels and their channels are."""
    w, a = weights_memory(graph, config_of), activation_memory(graph, config_of)
    b = bops(graph, config_of, adapter.kernel_axes, adapter.kernel_attr)
    return ResourceUtilization(weights_memory=w, activation_memory=a, total_memory=w + a,
                               bops=b if math.isfinite(b) else math.inf)
