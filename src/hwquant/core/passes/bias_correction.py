"""Weights bias correction: compensate the mean shift that kernel quantization causes.

A layer y = W x + b computed with the quantized kernel Q(W) is off by (Q(W) - W) x, whose mean
over the data is (Q(W) - W) E[x]. Adding (W - Q(W)) E[x] to the bias removes that mean error:

    b' = b + (W - Q(W)) mu,    mu = per-input-channel mean of the layer's input (calibration data)

with the kernel error summed over the spatial taps for convolutions (exact away from zero-padded
borders), per group for grouped / depthwise convolutions, and averaged over the stride phases for
transposed convolutions. A layer without a bias gets one (where the layer can carry one).

Runs after the quantization parameters are known (`compute_parameters`, and after shift-negative
correction, whose added node is then the layer's input). Reads `mu` from the statistics of the
node feeding the layer (`TensorStatistics(per_channel=True).channel_mean`): that node must be
observed during calibration, which `bias_correction_inputs` lists. Q(W) is computed with
`quant_math` from the node's final config (the same grid as its weight quantizer).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from hwquant.core.numerics import quant_math
from hwquant.core.graph.framework_adapter import FrameworkAdapter, LinearGeometry
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.statistics.node_parameters import add_to_bias
from hwquant.core.statistics.tensor_statistics import TensorStatistics


def _kernel_config(node: Node, config, adapter: FrameworkAdapter):
    if config is None:
        return None
    wq = config.weights_quantization_cfg
    kernel = adapter.kernel_attr(node)
    wc = wq.attrs.get(kernel) if kernel is not None else None
    if not wq.weights_bias_correction or wc is None or not wc.enable_weights_quantization:
        return None
    return wc


def bias_correction_inputs(graph: Graph, adapter: FrameworkAdapter) -> List[str]:
    """Nodes whose per-channel statistics bias correction reads (the inputs of the layers that may
    get it): calibration must observe them, besides the nodes whose output is quantized."""
    names: List[str] = []
    for node in graph:
        if len(node.inputs) == 1 and adapter.linear_geometry(node) is not None and any(
                _kernel_config(node, c, adapter) is not None for c in node.candidates):
            if node.inputs[0] not in names:
                names.append(node.inputs[0])
    return names


def output_mean_shift(error: np.ndarray, g: LinearGeometry, mu: np.ndarray) -> np.ndarray:
    """Per output channel, the mean of the layer's output change caused by adding `error` (in the core's
    kernel layout, FrameworkAdapter.canonical_kernel) to its kernel, for an input whose per-channel
    mean is `mu` (length in_channels)."""
    e = error.reshape(error.shape[0], error.shape[1], -1).sum(axis=2)  # kernel summed over spatial taps
    if g.is_dense:
        return e @ mu
    groups = g.groups
    mu_g = mu.reshape(groups, -1)  # (groups, in per group)
    if g.kind == "conv":
        out_per_group = e.shape[0] // groups
        return np.einsum("oi,oi->o", e, mu_g[np.arange(e.shape[0]) // out_per_group])
    # transposed conv: kernel (in, out per group, ...); each output position gets 1 / prod(stride) of the taps
    in_per_group = e.shape[0] // groups
    out = np.concatenate([e[k * in_per_group:(k + 1) * in_per_group].T @ mu_g[k] for k in range(groups)])
    return out / float(np.prod(g.stride or (1,)))


def _input_mean(graph: Graph, adapter: FrameworkAdapter, statistics: Dict[str, TensorStatistics], node: Node,
                g: LinearGeometry) -> Optional[np.ndarray]:
    if len(node.inputs) != 1:
        return None
    stats = statistics.get(node.inputs[0])
    if stats is None or not stats.per_channel or stats.count == 0:
        return None
    shape = graph.node(node.inputs[0]).output_shape
    if g.is_dense and not (isinstance(shape, tuple) and len(shape) >= 2
                           and adapter.activation_channel_axis % len(shape) == len(shape) - 1):
        return None  # a dense layer reads the last axis: the statistics must be per that axis
    mu = np.asarray(stats.channel_mean, np.float64)
    return mu if mu.shape == (g.in_channels,) else None


def apply_bias_correction(graph: Graph, adapter: FrameworkAdapter, statistics: Dict[str, TensorStatistics],
                          quantized_kernels: Optional[Dict[str, np.ndarray]] = None) -> int:
    """Correct the bias of every layer whose final config has weights_bias_correction and a
    quantized kernel with parameters, and whose input has per-channel statistics; returns how many
    layers were corrected. Needs the final configs' weights quantization parameters.
    ``quantized_kernels`` ({node name: Q(W)}) gives kernels not rounded to nearest (GPTQ's learned
    rounding); the others are quantized with their final config."""

    corrected = 0
    for node in graph:
        wc = _kernel_config(node, node.final_config, adapter)
        g = adapter.linear_geometry(node)
        if wc is None or g is None or not wc.weights_quantization_params:
            continue
        mu = _input_mean(graph, adapter, statistics, node, g)
        kernel_attr, bias_attr = adapter.kernel_attr(node), adapter.bias_attr(node)
        if mu is None or bias_attr is None:
            continue
        assert kernel_attr is not None  # _kernel_config found a config for it
        w = node.weights[kernel_attr]
        axis = wc.weights_channels_axis if wc.weights_per_channel_threshold else None
        q = (quantized_kernels or {}).get(node.name)
        if q is None:
            q = quant_math.fake_quantize_with(wc.weights_quantization_method, wc.weights_n_bits,
                                              wc.weights_quantization_params, np.asarray(w, np.float32), axis)
        error = adapter.canonical_kernel(node, np.asarray(w, np.float64) - np.asarray(q, np.float64))
        correction = output_mean_shift(error, g, mu)
        add_to_bias(node, adapter, correction)
        corrected += 1
    return corrected
