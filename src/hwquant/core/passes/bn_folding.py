"""Fold a batch-norm into the convolution or linear layer before it.

y = gamma * (W x + b - mean) / sqrt(var + eps) + beta  ==  W' x + b'  with
W' = W * s (s = gamma / sqrt(var + eps), along W's output channels) and b' = (b - mean) * s + beta.
Done only where the layer's output feeds the batch-norm alone, so no other reader sees the change.
The layer is then named ``<layer>_bn``, as MCT names it.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from hwquant.core.graph.framework_adapter import FrameworkAdapter
from hwquant.core.graph.model_graph import Graph, Node


def fold_batch_norms(graph: Graph, adapter: FrameworkAdapter, priors: Optional[dict] = None,
                     only: Optional[Callable[[Node], bool]] = None) -> int:
    """Fold every foldable batch-norm (or those ``only`` accepts); returns how many were folded. ``priors``
    (keyed by layer name, channel_equalization.batch_norm_priors) follow the renamed layers."""
    folded = 0
    for bn in graph:
        params = adapter.batch_norm_params(bn)
        if params is None or len(bn.inputs) != 1 or (only is not None and not only(bn)):
            continue
        layer = graph.node(bn.inputs[0])
        axes, kernel, bias = adapter.kernel_axes(layer), adapter.kernel_attr(layer), adapter.bias_attr(layer)
        if axes is None or kernel is None or bias is None or len(graph.successors(layer)) != 1 or graph.is_output(layer):
            continue
        w = layer.weights[kernel]
        if w.shape[axes[0]] != params.gamma.shape[0]:
            continue  # e.g. a grouped transposed conv whose output axis is not whole
        scale = params.gamma / np.sqrt(params.var + params.eps)
        shape = [1] * w.ndim
        shape[axes[0]] = -1
        b = layer.weights.get(bias)
        b = np.zeros_like(params.mean) if b is None else b
        layer.set_weight(kernel, (w * scale.reshape(shape)).astype(w.dtype))
        layer.set_weight(bias, ((b - params.mean) * scale + params.beta).astype(w.dtype))
        layer.output_shape = bn.output_shape
        graph.remove_node(bn)
        graph.rename_node(layer, f"{layer.name}_bn", priors)  # MCT's name for a layer with a folded batch-norm
        folded += 1
    return folded
