"""What can be pruned, found from the graph, framework-free (over the adapter's facts).

A section is an entry layer (a convolution or dense layer) whose output channels can be removed, the
channel-wise layers that carry those channels on (batch norms, depthwise convolutions, element-wise
activations, pooling, dropout: each loses the same channels), and the exit layer that reads them as input
channels (the next convolution or dense layer, whose kernel loses those input channels). What ties
channels to other tensors is left whole and said: a residual add or a concatenation, a layer read by
several others, a reshape, and the model's outputs, which keep their channels."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from hwquant.core.graph import Graph, Node
from hwquant.tpc.enums import OperatorSetNames

# Operator sets (the TPC's names) that act on each channel alone and keep the channel count.
CHANNEL_WISE_OPSETS = tuple(o.value for o in (
    OperatorSetNames.RELU, OperatorSetNames.RELU6, OperatorSetNames.LEAKY_RELU, OperatorSetNames.ELU,
    OperatorSetNames.HARD_TANH, OperatorSetNames.SWISH, OperatorSetNames.SIGMOID, OperatorSetNames.TANH,
    OperatorSetNames.GELU, OperatorSetNames.HARDSIGMOID, OperatorSetNames.HARDSWISH, OperatorSetNames.PRELU,
    OperatorSetNames.DROPOUT, OperatorSetNames.MAXPOOL, OperatorSetNames.AVGPOOL))


@dataclass
class Section:
    entry: str                                   # its output channels are removed
    channel_wise: List[str] = field(default_factory=list)  # each loses the same channels
    exit: str = ""                               # its input channels are removed


def _is_kernel_layer(node: Node, adapter: Any) -> bool:
    geometry = adapter.linear_geometry(node)
    return geometry is not None and geometry.groups == 1 and adapter.kernel_axes(node) is not None


def _is_depthwise(node: Node, adapter: Any) -> bool:
    geometry = adapter.linear_geometry(node)
    return geometry is not None and geometry.groups > 1 and geometry.groups == geometry.in_channels \
        and geometry.out_channels == geometry.in_channels


def _is_channel_wise(node: Node, adapter: Any) -> bool:
    return adapter.batch_norm_params(node) is not None or _is_depthwise(node, adapter) \
        or adapter.activation_info(node) is not None or node.opset in CHANNEL_WISE_OPSETS \
        or adapter.commutes_with_channel_scale(node)


def prunable_sections(graph: Graph, adapter: Any) -> Tuple[List[Section], Dict[str, str]]:
    """(the sections whose channels can be removed, {kernel layer: why its output channels cannot})."""
    sections: List[Section] = []
    refused: Dict[str, str] = {}
    for node in graph:
        if not _is_kernel_layer(node, adapter):
            continue
        section, why = _follow(graph, adapter, node)
        if section is not None:
            sections.append(section)
        else:
            refused[node.name] = why
    return sections, refused


def _follow(graph: Graph, adapter: Any, entry: Node) -> Tuple[Optional[Section], str]:
    section = Section(entry.name)
    current = entry
    while True:
        if graph.is_output(current):
            return None, f"'{current.name}' is a model output: its channels are kept"
        readers = graph.successors(current)
        if len(readers) != 1:
            return None, f"'{current.name}' is read by {len(readers)} layers (a residual or branch ties its channels)"
        reader = readers[0]
        if reader.inputs != [current.name]:
            return None, f"'{reader.name}' combines '{current.name}' with other tensors (add, concatenation...)"
        if _is_kernel_layer(reader, adapter):
            section.exit = reader.name
            return section, ""
        if not _is_channel_wise(reader, adapter):
            return None, f"'{reader.name}' ({getattr(reader.type, '__name__', reader.type)}) does not act per channel"
        section.channel_wise.append(reader.name)
        current = reader
