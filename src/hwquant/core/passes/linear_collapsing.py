"""Collapse two consecutive linear layers (no activation between them) into one.

Two layers L2(L1(x)) whose intermediate tensor has no other reader are one linear map. They are
replaced by a single layer when that layer exists in the framework (exactly: outputs equal up to
float rounding) and has no more kernel parameters than the two together (as MCT):

- dense -> dense:       W = W2 W1, b = W2 b1 + b2;
- conv k x k -> conv 1x1 (second: no padding, groups 1; first: groups 1, any stride / padding /
  dilation / padding mode): W[o, i, ...] = sum_c W2[o, c] W1[c, i, ...], b = W2 b1 + b2, with the
  first layer's geometry and stride s1 * s2 (a strided 1x1 conv subsamples the first's output);
- conv 1x1 (stride 1, no padding, groups 1) -> conv k x k (groups 1): W[o, i, ...] =
  sum_c W2[o, c, ...] W1[c, i], b = b2 + sum_c,k W2[o, c, k] b1[c], with the second layer's
  geometry; when the second zero-pads, only if b1 is zero (the padded border of L1's output is 0,
  not b1).

The collapsed layer takes the second layer's place (and output), named ``<first>_<second>_collapsed``
as MCT names it; the first layer disappears.
Runs in `prepare`, after batch-norm folding (so conv -> BN -> conv collapses too). Framework-free:
the geometry and the rebuilt layer come from the adapter.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, cast

import numpy as np

from hwquant.core.graph.framework_adapter import FrameworkAdapter, LinearGeometry
from hwquant.core.graph.model_graph import Graph, Node


def single_reader(graph: Graph, node: Node) -> Optional[Node]:
    """The node's only reader, or None if it has several / none or is a model output."""
    users = graph.successors(node)
    if len(users) != 1 or graph.is_output(node):
        return None
    return users[0]


def _weights(node: Node, adapter: FrameworkAdapter) -> Optional[Tuple[np.ndarray, Optional[np.ndarray]]]:
    kernel, bias = adapter.kernel_attr(node), adapter.bias_attr(node)
    if kernel is None or kernel not in node.weights:
        return None
    return (adapter.canonical_kernel(node, np.asarray(node.weights[kernel], np.float64)),
            None if bias is None or bias not in node.weights else np.asarray(node.weights[bias], np.float64))


def _bias_sum(*parts: Optional[np.ndarray]) -> Optional[np.ndarray]:
    present = [p for p in parts if p is not None]
    return None if not present else cast(np.ndarray, sum(present))  # not the start value 0: present is non-empty


def compose(g1: LinearGeometry, w1: np.ndarray, b1: Optional[np.ndarray], g2: LinearGeometry, w2: np.ndarray,
            b2: Optional[np.ndarray]) -> Optional[Tuple[np.ndarray, Optional[np.ndarray], LinearGeometry]]:
    """(kernel, bias, geometry) of the single layer equal to layer 2 after layer 1, or None if no
    single layer of the same kind computes it exactly. Kernels in the core's layout."""
    if g1.is_dense and g2.is_dense:
        return w2 @ w1, _bias_sum(None if b1 is None else w2 @ b1, b2), dataclasses.replace(
            g1, out_channels=g2.out_channels)
    if not (g1.is_conv and g2.is_conv) or len(g1.kernel_size) != len(g2.kernel_size) or g1.groups != 1 \
            or g2.groups != 1:
        return None
    if all(k == 1 for k in g2.kernel_size) and not g2.has_padding:
        m2 = w2.reshape(w2.shape[0], w2.shape[1])
        kernel = np.tensordot(m2, w1, axes=([1], [0]))
        stride = tuple(a * b for a, b in zip(g1.stride, g2.stride))
        return kernel, _bias_sum(None if b1 is None else m2 @ b1, b2), dataclasses.replace(
            g1, out_channels=g2.out_channels, stride=stride)
    if g1.is_pointwise:
        if g2.has_padding and g2.zero_padding and b1 is not None and np.any(b1 != 0):
            return None
        m1 = w1.reshape(w1.shape[0], w1.shape[1])
        kernel = np.moveaxis(np.tensordot(w2, m1, axes=([1], [0])), -1, 1)  # (O, k..., I) -> (O, I, k...)
        extra = None if b1 is None else np.tensordot(w2, b1, axes=([1], [0])).reshape(w2.shape[0], -1).sum(axis=1)
        return kernel, _bias_sum(extra, b2), dataclasses.replace(g2, in_channels=g1.in_channels)
    return None


def collapse_linear_layers(graph: Graph, adapter: FrameworkAdapter, priors: Optional[dict] = None) -> int:
    """Collapse every collapsible pair (repeatedly, so chains collapse to one layer); returns the
    number of layers removed. Apply when QuantizationConfig.linear_collapsing is set. ``priors``
    (keyed by layer name) follow the renamed layers."""
    collapsed = 0
    while True:
        for first in graph:
            second = single_reader(graph, first)
            if second is None or second.inputs != [first.name] or len(first.inputs) != 1:
                continue
            g1, g2 = adapter.linear_geometry(first), adapter.linear_geometry(second)
            p1, p2 = _weights(first, adapter), _weights(second, adapter)
            if g1 is None or g2 is None or p1 is None or p2 is None:
                continue
            result = compose(g1, *p1, g2, *p2)
            if result is None:
                continue
            kernel, bias, geometry = result
            if kernel.size > p1[0].size + p2[0].size:
                continue  # the collapsed layer would be bigger than the two
            first_kernel = adapter.kernel_attr(first)
            assert first_kernel is not None  # _weights(first) found it
            dtype = first.weights[first_kernel].dtype
            graph.remove_node(first)  # the second layer now reads the first's input
            adapter.set_linear_layer(second, adapter.framework_kernel(second, kernel).astype(dtype),
                                     None if bias is None else bias.astype(dtype), geometry)
            # MCT's name; the collapsed layer has the second's output, so its prior
            graph.rename_node(second, f"{first.name}_{second.name}_collapsed", priors)
            collapsed += 1
            break
        else:
            return collapsed
