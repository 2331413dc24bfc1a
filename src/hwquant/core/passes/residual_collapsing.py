"""Collapse a residual addition into the convolution it bypasses: conv(x) + x == conv'(x).

When a convolution keeps its input's shape (in channels == out channels, stride 1, padding that
keeps the spatial size and puts the kernel tap at offset `before / dilation` exactly over the
output position), adding its input equals adding 1 to that tap of each channel's own kernel
(W'[o, o mod (C / groups), centre] = W[o, ...] + 1): the Add disappears and the model is exactly
the same. Done only where the convolution's output feeds the Add alone. As MCT (which requires
groups == 1 and 'same' padding); grouped and depthwise convolutions are handled too.

Runs in `prepare`, after batch-norm folding and linear collapsing.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from hwquant.core.graph.framework_adapter import FrameworkAdapter, LinearGeometry
from hwquant.core.graph.model_graph import Graph
from hwquant.core.passes.linear_collapsing import single_reader


def identity_tap(g: LinearGeometry) -> Optional[tuple]:
    """The kernel index (per spatial dim) that reads the input at the output's own position, or
    None if the convolution does not keep the input's shape."""
    if not g.is_conv or g.in_channels != g.out_channels or any(s != 1 for s in g.stride):
        return None
    tap = []
    for k, d, (lo, hi) in zip(g.kernel_size, g.dilation, g.padding):
        if lo + hi != d * (k - 1) or lo % d:
            return None
        tap.append(lo // d)
    return tuple(tap)


def collapse_residuals(graph: Graph, adapter: FrameworkAdapter, priors: Optional[Dict] = None) -> int:
    """Collapse every `conv(x) + x` (either operand order); returns how many. `priors` (from
    channel_equalization.batch_norm_priors) loses the collapsed convolutions, whose output is no
    longer the batch-norm's. Apply when QuantizationConfig.residual_collapsing is set."""
    collapsed = 0
    for add in graph:
        if not adapter.is_add(add):
            continue
        for conv_name, x_name in (add.inputs, add.inputs[::-1]):
            conv = graph.node(conv_name)
            if conv.inputs != [x_name] or single_reader(graph, conv) is not add:
                continue
            g, kernel_attr = adapter.linear_geometry(conv), adapter.kernel_attr(conv)
            tap = None if g is None or kernel_attr not in conv.weights else identity_tap(g)
            if tap is None:
                continue
            assert g is not None and kernel_attr is not None  # tap is None otherwise
            w = np.array(adapter.canonical_kernel(conv, conv.weights[kernel_attr]))  # (O, I / groups, *k)
            per_group = g.in_channels // g.groups
            for o in range(g.out_channels):
                w[(o, o % per_group) + tap] += 1
            conv.set_weight(kernel_attr, adapter.framework_kernel(conv, w))
            conv.output_shape = add.output_shape
            graph.remove_node(add, replace_with=conv.name)
            if priors is not None:
                priors.pop(conv.name, None)
            graph.rename_node(conv, f"{conv.name}_{add.name}_collapsed")  # MCT's name
            collapsed += 1
            break
    return collapsed
