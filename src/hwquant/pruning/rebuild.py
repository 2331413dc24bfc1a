"""The graph with the chosen channels removed, framework-free: each section's entry layer loses output
channels, its channel-wise layers the same channels, its exit layer the matching input channels (or
features, through a flatten). The layers are made anew with fewer channels through the adapter
(``set_linear_layer``, ``keep_channels``): a smaller model, not masked weights."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from hwquant.core.graph.model_graph import Graph, Node
from hwquant.pruning.sections import Section, is_depthwise


def _with_channels(node: Node, axis: int, count: int) -> None:
    shape = list(node.output_shape)
    shape[axis] = count
    node.output_shape = tuple(shape)


def removed_inputs_shift(graph: Graph, adapter: Any, section: Section, kept: np.ndarray,
                         input_means: np.ndarray) -> np.ndarray:
    """What the removed channels added to the exit layer's output on average (their mean over the data times
    their kernel taps): folded into its bias, the layer's mean output stays as it was (mean replacement)."""
    exit_ = graph.node(section.exit)
    out_axis, in_axis = adapter.kernel_axes(exit_)
    kernel = np.moveaxis(np.asarray(exit_.weights[adapter.kernel_attr(exit_)], np.float64), (out_axis, in_axis), (0, 1))
    taps = kernel.reshape(kernel.shape[0], kernel.shape[1], -1).sum(-1)  # (a constant input meets every tap)
    removed = np.setdiff1d(np.arange(kernel.shape[1]), section.exit_inputs(kept))
    return taps[:, removed] @ np.asarray(input_means, np.float64)[removed]


def prune_section(graph: Graph, adapter: Any, section: Section, kept: np.ndarray,
                  exit_bias_shift: Optional[np.ndarray] = None) -> None:
    """Remove every channel but ``kept`` from the section's layers; ``exit_bias_shift`` is added to the exit's
    bias (made if it had none)."""
    kept = np.sort(np.asarray(kept, np.int64))
    entry, exit_ = graph.node(section.entry), graph.node(section.exit)
    geometry = adapter.linear_geometry(entry)
    # (the framework's own axis, not sections' normalised one: Keras' -1 also names the channels after a global
    # pooling drops the spatial axes)
    axis = len(entry.output_shape) - 1 if geometry.is_dense else adapter.activation_channel_axis
    out_axis, _ = adapter.kernel_axes(entry)
    kernel = np.take(entry.weights[adapter.kernel_attr(entry)], kept, axis=out_axis)
    bias = entry.weights.get(adapter.bias_attr(entry))
    adapter.set_linear_layer(entry, kernel, None if bias is None else np.asarray(bias)[kept])
    _with_channels(entry, axis, len(kept))
    flattened = False
    for name in section.channel_wise:
        node = graph.node(name)
        flattened = flattened or name == section.flatten
        if flattened and section.exit_features is not None:  # the flatten and after: features, not channels
            _with_channels(node, 1, len(kept) * section.exit_features.shape[1])
            continue
        if is_depthwise(node, adapter):
            g = adapter.linear_geometry(node)
            dw_kernel = np.take(node.weights[adapter.kernel_attr(node)], kept, axis=adapter.kernel_axes(node)[0])
            dw_bias = node.weights.get(adapter.bias_attr(node))
            adapter.set_linear_layer(node, dw_kernel, None if dw_bias is None else np.asarray(dw_bias)[kept],
                                     dataclasses.replace(g, in_channels=len(kept), out_channels=len(kept),
                                                         groups=len(kept)))
        elif node.weights:
            adapter.keep_channels(node, kept)
        _with_channels(node, axis, len(kept))
    _, in_axis = adapter.kernel_axes(exit_)
    exit_kernel = np.take(exit_.weights[adapter.kernel_attr(exit_)], section.exit_inputs(kept), axis=in_axis)
    bias = exit_.weights.get(adapter.bias_attr(exit_))
    if exit_bias_shift is not None and np.any(exit_bias_shift):
        bias = (0.0 if bias is None else np.asarray(bias, np.float64)) + exit_bias_shift
    adapter.set_linear_layer(exit_, exit_kernel, None if bias is None else np.asarray(bias, np.float32))
