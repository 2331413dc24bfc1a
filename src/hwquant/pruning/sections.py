"""What can be pruned, found from the graph, framework-free (over the adapter's facts).

A section is an entry layer (a convolution or dense layer) whose output channels can be removed, the
channel-wise layers that carry those channels on (batch norms, depthwise convolutions, element-wise
activations, pooling, dropout: each loses the same channels), at most one flatten (each channel becomes
a block of features), and the exit layer that reads them as input channels (the next convolution or
dense layer, whose kernel loses those input channels or features). What ties channels to other tensors
is left whole and said: a residual add or a concatenation, a layer read by several others, a reshape,
and the model's outputs, which keep their channels."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hwquant.core.graph.model_graph import Graph, Node
from hwquant.tpc.enums import OperatorSetNames

# Operator sets (the TPC's names) that act on each channel alone and keep the channel count.
CHANNEL_WISE_OPSETS = tuple(o.value for o in (
    OperatorSetNames.RELU, OperatorSetNames.RELU6, OperatorSetNames.LEAKY_RELU, OperatorSetNames.ELU,
    OperatorSetNames.HARD_TANH, OperatorSetNames.SWISH, OperatorSetNames.SIGMOID, OperatorSetNames.TANH,
    OperatorSetNames.GELU, OperatorSetNames.HARDSIGMOID, OperatorSetNames.HARDSWISH, OperatorSetNames.PRELU,
    OperatorSetNames.DROPOUT, OperatorSetNames.MAXPOOL, OperatorSetNames.AVGPOOL))


SHAPE_READS = (OperatorSetNames.SIZE.value, OperatorSetNames.SHAPE.value)


@dataclass
class Section:
    entry: str                                   # its output channels are removed
    channels: int = 0                            # how many the entry has
    channel_wise: List[str] = field(default_factory=list)  # each loses the same channels
    exit: str = ""                               # its input channels (or features) are removed
    # with a flatten between (its name): row c holds the exit's input features that channel c became
    flatten: str = ""
    exit_features: Optional[np.ndarray] = None
    exit_axis: int = 1                            # where the exit's input tensor holds the channels / features

    @property
    def exit_input(self) -> str:
        """The tensor the exit layer reads."""
        return self.channel_wise[-1] if self.channel_wise else self.entry

    def exit_inputs(self, kept_channels: np.ndarray) -> np.ndarray:
        """The exit's input channels / features that remain when ``kept_channels`` do (sorted)."""
        kept = np.sort(np.asarray(kept_channels, np.int64))
        return kept if self.exit_features is None else np.sort(self.exit_features[kept].ravel())


def is_kernel_layer(node: Node, adapter: Any) -> bool:
    geometry = adapter.linear_geometry(node)
    return geometry is not None and geometry.groups == 1 and adapter.kernel_axes(node) is not None


def is_depthwise(node: Node, adapter: Any) -> bool:
    geometry = adapter.linear_geometry(node)
    return geometry is not None and geometry.groups > 1 and geometry.groups == geometry.in_channels \
        and geometry.out_channels == geometry.in_channels


def _is_channel_wise(node: Node, adapter: Any) -> bool:
    return adapter.batch_norm_params(node) is not None or is_depthwise(node, adapter) \
        or adapter.activation_info(node) is not None or adapter.operator_set(node) in CHANNEL_WISE_OPSETS \
        or adapter.commutes_with_channel_scale(node)


def _from_shapes(graph: Graph, adapter: Any, name: str) -> bool:
    """Whether a tensor holds only shape figures (x.size(0), x.shape[0] and what is computed from them)."""
    node = graph.node(name)
    if adapter.operator_set(node) in SHAPE_READS:
        return True
    return bool(node.inputs) and not node.weights and all(_from_shapes(graph, adapter, i) for i in node.inputs)


def _keeps_channels(node: Node, adapter: Any) -> bool:
    """A channel-wise layer with weights whose channels the rebuild can remove (adapter.keep_channels or,
    for a depthwise convolution, set_linear_layer)."""
    return adapter.batch_norm_params(node) is not None or is_depthwise(node, adapter) \
        or adapter.operator_set(node) == OperatorSetNames.PRELU.value


def _rank(node: Node) -> Optional[int]:
    shape = node.output_shape
    return len(shape) if isinstance(shape, tuple) else None


def _axis(axis: int, rank: int) -> int:
    return axis % rank


def _channel_axis(node: Node, adapter: Any, rank: int) -> int:
    """The axis a layer's channels lie on: a dense layer's features on the last, a convolution's and any
    per-channel layer's at the framework's channel axis."""
    geometry = adapter.linear_geometry(node)
    return rank - 1 if geometry is not None and geometry.is_dense else _axis(adapter.activation_channel_axis, rank)


def _flattened_features(node: Node, producer: Node, channel_axis: int, adapter: Any) -> Optional[np.ndarray]:
    """For a flatten of every axis but the batch, (channels, features per channel): where each channel's
    values land in the flat vector (row-major, as both frameworks flatten); None for any other flatten."""
    if not adapter.is_flatten(node) or not isinstance(node.output_shape, tuple) \
            or not isinstance(producer.output_shape, tuple) or len(node.output_shape) != 2:
        return None
    shape = tuple(producer.output_shape[1:])
    if any(not isinstance(d, int) for d in shape) or node.output_shape[1] != int(np.prod(shape)):
        return None
    positions = np.arange(int(np.prod(shape))).reshape(shape)
    moved = np.moveaxis(positions, channel_axis - 1, 0)
    return moved.reshape(moved.shape[0], -1)


def prunable_sections(graph: Graph, adapter: Any) -> Tuple[List[Section], Dict[str, str]]:
    """(the sections whose channels can be removed, {kernel layer: why its output channels cannot})."""
    sections: List[Section] = []
    refused: Dict[str, str] = {}
    for node in graph:
        if not is_kernel_layer(node, adapter):
            continue
        section, why = _follow(graph, adapter, node)
        if section is not None:
            sections.append(section)
        else:
            refused[node.name] = why
    return sections, refused


def _follow(graph: Graph, adapter: Any, entry: Node) -> Tuple[Optional[Section], str]:
    rank = _rank(entry)
    if rank is None or rank < 2:
        return None, f"'{entry.name}' has no single tensor output"
    axis = _channel_axis(entry, adapter, rank)
    kernel = np.asarray(entry.weights[adapter.kernel_attr(entry)])
    section = Section(entry.name, channels=int(kernel.shape[adapter.kernel_axes(entry)[0]]))
    current = entry
    while True:
        if graph.is_output(current):
            return None, f"'{current.name}' is a model output: its channels are kept"
        # (a read of the tensor's shape, x.size(0) for a view, uses no channel's values)
        readers = [r for r in graph.successors(current) if adapter.operator_set(r) not in SHAPE_READS]
        if len(readers) != 1:
            names = ", ".join(f"'{r.name}'" for r in readers[:4])
            return None, (f"'{current.name}' is read by {len(readers)} layers ({names}): a residual, a branch or a "
                          "shape read ties its channels")
        reader = readers[0]
        if [i for i in reader.inputs if not _from_shapes(graph, adapter, i)] != [current.name]:
            return None, f"'{reader.name}' combines '{current.name}' with other tensors (add, concatenation...)"
        if is_kernel_layer(reader, adapter):
            return _close(section, reader, adapter, axis, rank)
        if section.exit_features is None and (features := _flattened_features(reader, current, axis, adapter)) is not None:
            section.exit_features, section.flatten, axis, rank = features, reader.name, 1, 2
            section.channel_wise.append(reader.name)
            current = reader
            continue
        if _is_channel_wise(reader, adapter) and not reader.weights and rank > 2 and _rank(reader) == 2 \
                and reader.output_shape[1] == current.output_shape[axis]:  # a global pooling: (batch, channels)
            axis, rank = 1, 2
            section.channel_wise.append(reader.name)
            current = reader
            continue
        if not _is_channel_wise(reader, adapter) or _rank(reader) != rank:
            return None, f"'{reader.name}' ({getattr(reader.type, '__name__', reader.type)}) does not act per channel"
        if reader.weights and not _keeps_channels(reader, adapter):
            return None, f"'{reader.name}' holds weights hwquant cannot remove channels from"
        if reader.weights and (section.exit_features is not None or _channel_axis(reader, adapter, rank) != axis):
            return None, f"'{reader.name}' holds weights along another axis than '{entry.name}''s channels"
        section.channel_wise.append(reader.name)
        current = reader


def _close(section: Section, exit_: Node, adapter: Any, axis: int, rank: int) -> Tuple[Optional[Section], str]:
    """The section ends at ``exit_`` if that layer reads the channels (or their features) as its inputs."""
    if _rank(exit_) != rank or _channel_axis(exit_, adapter, rank) != axis:
        return None, f"'{exit_.name}' reads another axis than '{section.entry}''s channels"
    kernel = np.asarray(exit_.weights[adapter.kernel_attr(exit_)])
    inputs = kernel.shape[adapter.kernel_axes(exit_)[1]]
    expected = section.channels if section.exit_features is None else section.exit_features.size
    if inputs != expected:
        return None, f"'{exit_.name}' reads {inputs} inputs where '{section.entry}' gives {expected}"
    section.exit, section.exit_axis = exit_.name, axis
    return section, ""
