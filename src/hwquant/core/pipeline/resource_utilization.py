"""Resource utilization of a quantized graph: weights memory, activation memory, total memory and
bit-operations (BOPs), for the final configs or for any choice of candidates.

- Weights memory (bytes): the quantized weight tensors at their bit widths; weights left float
  (biases, a batch-norm the TPC does not quantize) do not count, as in MCT, whose figures users
  compute their targets from.
- Activation memory (bytes, one sample): the peak, over the execution schedule (the graph's
  topological order), of the activation tensors alive at once (tensors inside a fused group are
  never stored, so they do not count). A tensor lives from the node that
  produces it until its last reader has run; its size is its elements times its bit width (the
  node's activation bits when quantized; quantization-preserving nodes keep their input's width,
  32 bits behind an unquantized one). As in MCT, tensors neither quantized nor preserving (a
  reshape the IMX500 1.0 TPC leaves unquantized, a float layer's output) do not count: a float
  tensor at the peak would hide every activation bit width from an activation-memory target.
  A zero padding read only by a layer with a kernel is that layer's padding (`padding_layers`): a
  PyTorch convolution pads inside itself, where Keras computes the same network with a ZeroPadding2D
  before a 'valid' convolution (keras.applications' stride-2 convolutions). It stores no tensor of its
  own, its input lives until the layer's output is written, and the layer reads its input's bits
  (BOPs), so both frameworks give the same figures for the same network.
- Total memory: weights + activation memory.
- BOPs: for each layer with a kernel, multiply-accumulates x kernel bits x input activation bits.
"""
from __future__ import annotations

import math
from typing import Callable, Collection, Dict, List, Mapping, Optional, Tuple

import numpy as np

from hwquant.constants import FLOAT_BITWIDTH
from hwquant.core.configuration.config import ResourceUtilization
from hwquant.core.graph.model_graph import Graph, Node, NodeKind
from hwquant.core.graph.node_quantization_config import NodeQuantizationConfig

ConfigOf = Callable[[Node], Optional[NodeQuantizationConfig]]


def final_config(node: Node) -> Optional[NodeQuantizationConfig]:
    return node.final_config


def base_config(node: Node) -> Optional[NodeQuantizationConfig]:
    """The TPC base (single-precision) config: the first candidate."""
    return node.candidates[0] if node.candidates else None


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


def node_activation_bits(cfg: Optional[NodeQuantizationConfig]) -> int:
    """Bits of a node's output under `cfg` (32 when not quantized); see `bits_source` for preserving nodes."""
    a = cfg.activation_quantization_cfg if cfg else None
    return a.activation_n_bits if a is not None and a.enable_activation_quantization else FLOAT_BITWIDTH


def bits_source(graph: Graph, node: Node, paddings: Collection[str] = ()) -> Node:
    """The node whose config sets `node`'s output bits: itself, or for a quantization-preserving node
    (or a padding of its reader, ``paddings``: see `padding_layers`) the source of its first input. A TPC
    marks such a node preserving with its activation quantization disabled (MCT refuses both set), so
    the flag alone decides."""
    while node.inputs and (node.name in paddings or node.candidates
                           and node.candidates[0].activation_quantization_cfg.quantization_preserving):
        node = graph.node(node.inputs[0])
    return node


def padding_layers(graph: Graph, is_zero_padding: Callable[[Node], bool],
                   kernel_axes: Callable[[Node], Optional[tuple]]) -> Dict[str, str]:
    """{zero padding: the layer it belongs to}: a zero padding whose only reader is a layer with a kernel
    (a convolution), and which does not requantize (its output is its input's values and zeros: not quantized,
    or quantization-preserving), is that layer's padding, as a PyTorch convolution holds it. Activation memory
    and BOPs count it so (module docstring): the same network gives the same figures in either framework."""
    readers: Dict[str, List[Node]] = {}
    for node in graph:
        for src in dict.fromkeys(node.inputs):
            readers.setdefault(src, []).append(node)
    outputs = set(graph.output_names())
    out: Dict[str, str] = {}
    for node in graph:
        reads = readers.get(node.name, [])
        if len(reads) != 1 or node.name in outputs or not is_zero_padding(node) \
                or any(c.activation_quantization_cfg.quantized for c in node.candidates):
            continue
        layer = reads[0]
        if layer.inputs[0] == node.name and kernel_axes(layer) is not None:
            out[node.name] = layer.name
    return out


def counts_in_memory(node: Node) -> bool:
    """Whether `node`'s output tensor counts in activation memory: quantized or quantization-preserving
    (MCT's AnyQuantizedNonFused criterion; fused-group insides are left out by `live_sets`)."""
    return any(c.activation_quantization_cfg.enable_activation_quantization
               or c.activation_quantization_cfg.quantization_preserving for c in node.candidates)


def activation_bits(graph: Graph, config_of: ConfigOf, paddings: Collection[str] = ()) -> Dict[str, int]:
    """The bit width of each node's output tensor."""
    return {node.name: node_activation_bits(config_of(bits_source(graph, node, paddings))) for node in graph}


def node_weights_bytes(node: Node, cfg: Optional[NodeQuantizationConfig], bits: Optional[int] = None) -> float:
    """The node's quantized weights at their bit widths, or at `bits` each (float ones do not count)."""
    attrs = cfg.weights_quantization_cfg.attrs if cfg else {}
    total = 0.0
    for key, w in node.weights.items():
        wc = attrs.get(key)
        if wc is not None and wc.enable_weights_quantization:
            total += w.size * (wc.weights_n_bits if bits is None else bits) / 8
    return total


def weights_memory(graph: Graph, config_of: ConfigOf) -> float:
    return sum(node_weights_bytes(node, config_of(node)) for node in graph)


def live_sets(graph: Graph, paddings: Optional[Mapping[str, str]] = None) -> List[List[Node]]:
    """The activation tensors alive at each step of the execution schedule (topological order): a
    tensor lives from its producer until its last reader (model outputs until the end). Tensors
    inside a fused group (a convolution's output before its activation) are never stored; tensors
    that are neither quantized nor preserving do not count (`counts_in_memory`). ``paddings`` ({zero
    padding: its layer}, `padding_layers`): each belongs to its layer's group (no tensor of its own, its
    input alive until the group's output is written)."""
    paddings = paddings or {}
    nodes = list(graph)
    position = {n.name: i for i, n in enumerate(nodes)}
    last_use = dict(position)

    def group_end(n: Node, i: int) -> int:
        if n.name in paddings:
            layer = graph.node(paddings[n.name])
            return group_end(layer, position[layer.name])
        return position.get(n.fused_into, i) if n.fused_into else i

    for i, n in enumerate(nodes):
        # a fused group runs as one kernel: what its first node reads stays alive until its output is
        # written (MCT's cut at a Conv -> ReLU group holds the convolution's input and the ReLU's output)
        end = group_end(n, i)
        for src in n.inputs:
            last_use[src] = max(last_use[src], end)
    for out in graph.output_names():
        last_use[out] = len(nodes)
    live: Dict[str, Node] = {}
    steps = []
    for i, n in enumerate(nodes):
        if n.kind != NodeKind.CONSTANT and n.fused_into in (None, n.name) and n.name not in paddings \
                and counts_in_memory(n):
            live[n.name] = n
        steps.append(list(live.values()))
        for name in [k for k in live if last_use[k] <= i]:
            del live[name]
    return steps


def activation_elements(node: Node) -> int:
    return _elements(node.output_shape)


def activation_memory(graph: Graph, config_of: ConfigOf, paddings: Optional[Mapping[str, str]] = None,
                      steps: Optional[List[List[Node]]] = None) -> float:
    """The largest live set's bytes; `steps`: `live_sets(graph, paddings)` where the caller has it already."""
    bits = activation_bits(graph, config_of, paddings or ())
    steps = live_sets(graph, paddings) if steps is None else steps
    return max((sum(activation_elements(n) * bits[n.name] / 8 for n in step) for step in steps), default=0.0)


def kernel_macs(node: Node, kernel_axes: Callable[[Node], Optional[tuple]],
                kernel_attr: Callable[[Node], Optional[str]]) -> Optional[Tuple[str, float]]:
    """(kernel attribute, multiply-accumulates per sample) of a layer with a kernel; MACs per output
    element = kernel size / output channels (exact for convolutions and linear layers, an upper
    bound for strided transposed ones)."""
    attr, axes = kernel_attr(node), kernel_axes(node)
    if attr is None or axes is None or attr not in node.weights or not node.inputs:
        return None
    w = node.weights[attr]
    return attr, _elements(node.output_shape) * w.size / w.shape[axes[0]]


def kernel_bits(cfg: Optional[NodeQuantizationConfig], attr: str) -> int:
    wc = cfg.weights_quantization_cfg.attrs.get(attr) if cfg else None
    return wc.weights_n_bits if wc is not None and wc.enable_weights_quantization else FLOAT_BITWIDTH


def bops(graph: Graph, config_of: ConfigOf, kernel_axes: Callable[[Node], Optional[tuple]],
         kernel_attr: Callable[[Node], Optional[str]], paddings: Collection[str] = ()) -> float:
    """Multiply-accumulates x kernel bits x input activation bits, over the layers with a kernel (a layer
    reading its padding reads the padding's input bits)."""
    bits = activation_bits(graph, config_of, paddings)
    total = 0.0
    for node in graph:
        km = kernel_macs(node, kernel_axes, kernel_attr)
        if km is not None:
            total += km[1] * kernel_bits(config_of(node), km[0]) * bits[node.inputs[0]]
    return total


def compute_resource_utilization(graph: Graph, config_of: ConfigOf, adapter) -> ResourceUtilization:
    """All four figures; `adapter` (the framework adapter) says where kernels and their channels are, and
    which nodes are zero paddings."""
    paddings = padding_layers(graph, adapter.is_zero_padding, adapter.kernel_axes)
    return _figures(graph, config_of, adapter, paddings, live_sets(graph, paddings))


def resource_utilization_against_float(graph: Graph, config_of: ConfigOf,
                                       adapter) -> Tuple[ResourceUtilization, ResourceUtilization]:
    """(`compute_resource_utilization`'s figures, the memory of the same weights and activation tensors kept as
    float32: what the quantized figures save against), the schedule worked out once for both."""
    paddings = padding_layers(graph, adapter.is_zero_padding, adapter.kernel_axes)
    steps = live_sets(graph, paddings)
    w = sum(node_weights_bytes(node, config_of(node), bits=FLOAT_BITWIDTH) for node in graph)
    a = activation_memory(graph, lambda node: None, paddings, steps)
    return (_figures(graph, config_of, adapter, paddings, steps),
            ResourceUtilization(weights_memory=w, activation_memory=a, total_memory=w + a))


def _figures(graph: Graph, config_of: ConfigOf, adapter, paddings: Mapping[str, str],
             steps: List[List[Node]]) -> ResourceUtilization:
    w, a = weights_memory(graph, config_of), activation_memory(graph, config_of, paddings, steps)
    b = bops(graph, config_of, adapter.kernel_axes, adapter.kernel_attr, paddings)
    return ResourceUtilization(weights_memory=w, activation_memory=a, total_memory=w + a,
                               bops=b if math.isfinite(b) else math.inf)
