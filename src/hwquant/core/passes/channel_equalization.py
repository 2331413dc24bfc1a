"""Activation channel equalization (MCT's `activation_channel_equalization`, "scale equalization").

For `layer1 -> BN (folded) -> ReLU -> [zero-pad / pooling / dropout] -> layer2`, the batch-norm
says what the pre-activation channels look like: channel c ~ N(beta_c, gamma_c^2). Assuming that
Gaussian, the ReLU's output channel c has the rectified-Gaussian standard deviation std_c, and
MCT scales the channel by

    s_c = min(1 / std_c, 1)

(the wide channels shrink to unit spread, the narrow ones stay): layer1's output channel c
(kernel and bias) is multiplied by s_c and layer2's input channel c divided by s_c. Since
relu(s x) == s relu(x) for s > 0, and zero padding / pooling / dropout commute with a positive
per-channel scale, the model is unchanged while the ReLU's channels get balanced ranges for the
per-tensor activation quantizer.

The batch-norm statistics are gone once the BN is folded: `batch_norm_priors` reads them before
folding; `equalize_activation_channels` runs after folding and fusing (it acts only where the ReLU's
output is quantized). MCT (PyTorch) matches Conv / ConvTranspose -> ReLU -> Conv / ConvTranspose;
dense -> ReLU -> dense is handled too. Layers without a batch-norm prior are left alone, as in MCT.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
from scipy.special import erf

from hwquant.core.graph.framework_adapter import FrameworkAdapter, LinearGeometry
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.passes.linear_collapsing import single_reader

Priors = Dict[str, Tuple[np.ndarray, np.ndarray]]  # layer name -> per-channel (mean, std) of its output


def batch_norm_priors(graph: Graph, adapter: FrameworkAdapter) -> Priors:
    """Per-channel (mean, std) = (beta, |gamma|) of the output of every kernel layer whose only
    reader is a batch-norm (keyed by the layer's name). Call before fold_batch_norms."""
    priors: Priors = {}
    for bn in graph:
        params = adapter.batch_norm_params(bn)
        if params is None or len(bn.inputs) != 1:
            continue
        layer = graph.node(bn.inputs[0])
        if adapter.kernel_axes(layer) is not None and single_reader(graph, layer) is bn:
            priors[layer.name] = (np.asarray(params.beta, np.float64), np.abs(np.asarray(params.gamma, np.float64)))
    return priors


def rectified_gaussian_moments(mu: np.ndarray, std: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(mean, second moment) of relu(X), X ~ N(mu, std^2) (std > 0)."""
    var = std ** 2
    pdf_term = std / np.sqrt(2 * np.pi) * np.exp(-mu ** 2 / (2 * var))
    cdf = 0.5 * (1 + erf(mu / (np.sqrt(2) * std)))
    return mu * cdf + pdf_term, (mu ** 2 + var) * cdf + mu * pdf_term


def equalization_scale(mu: np.ndarray, std: np.ndarray) -> np.ndarray:
    """min(1 / std(relu(X)), 1) per channel (1 where the channel is constant)."""
    scale = np.ones_like(mu, dtype=np.float64)
    ok = std > 0
    mean, second = rectified_gaussian_moments(mu[ok], std[ok])
    out_std = np.sqrt(np.maximum(second - mean ** 2, 0.0))
    with np.errstate(divide="ignore"):
        scale[ok] = np.minimum(np.where(out_std > 0, 1.0 / out_std, 1.0), 1.0)
    return scale


def _scale_output_channels(node: Node, adapter: FrameworkAdapter, scale: np.ndarray) -> bool:
    kernel, bias, axes = adapter.kernel_attr(node), adapter.bias_attr(node), adapter.kernel_axes(node)
    assert kernel is not None and axes is not None  # a linear layer (a prior's layer has kernel axes)
    w = node.weights[kernel]
    if w.shape[axes[0]] != scale.size:
        return False  # a grouped transposed conv: its output-channel axis is per group
    shape = [1] * w.ndim
    shape[axes[0]] = -1
    node.set_weight(kernel, (w * scale.reshape(shape)).astype(w.dtype))
    if bias is not None and bias in node.weights:
        node.set_weight(bias, (node.weights[bias] * scale).astype(node.weights[bias].dtype))
    return True


def input_channel_factors(w: np.ndarray, axes: Tuple[int, int], g: LinearGeometry, per_channel: np.ndarray) -> np.ndarray:
    """`per_channel` (one value per input channel of the layer) broadcast onto the kernel `w`,
    for dense, (grouped) convolution and transposed-convolution kernels."""
    out_axis, in_axis = axes
    shape = [1] * w.ndim
    if w.shape[in_axis] == per_channel.size:
        shape[in_axis] = -1
        return per_channel.reshape(shape)
    # grouped convolution: output channel o reads input channels of its group
    groups, per_group = g.groups, w.shape[in_axis]
    out_per_group = w.shape[out_axis] // groups
    o = np.arange(w.shape[out_axis])
    table = per_channel.reshape(groups, per_group)[o // out_per_group]  # (O, in per group)
    shape[out_axis], shape[in_axis] = w.shape[out_axis], per_group
    if out_axis > in_axis:
        table = table.T
    return table.reshape(shape)


def equalize_activation_channels(graph: Graph, adapter: FrameworkAdapter, priors: Priors) -> int:
    """Equalize every matching layer1 -> ReLU -> [...] -> layer2 with a prior for layer1; returns
    how many. Apply when QuantizationConfig.activation_channel_equalization is set."""
    done = 0
    for act in graph:
        info = adapter.activation_info(act)
        if info is None or info.name != "relu" or len(act.inputs) != 1 or act.inputs[0] not in priors:
            continue
        if act.candidates and not any(c.activation_quantization_cfg.quantized for c in act.candidates):
            continue
        first = graph.node(act.inputs[0])
        g1 = adapter.linear_geometry(first)
        if g1 is None or single_reader(graph, first) is not act:
            continue
        prev, node = act, single_reader(graph, act)
        while node is not None and not g1.is_dense and adapter.commutes_with_channel_scale(node) \
                and node.inputs == [prev.name]:
            prev, node = node, single_reader(graph, node)
        g2 = None if node is None or node.inputs != [prev.name] else adapter.linear_geometry(node)
        if g2 is None or g1.is_dense != g2.is_dense:
            continue
        assert node is not None  # g2 is None otherwise
        mu, std = priors[first.name]
        scale = equalization_scale(mu, std)
        w2_attr = adapter.kernel_attr(node)
        if w2_attr is None or w2_attr not in node.weights or scale.size != g2.in_channels \
                or not _scale_output_channels(first, adapter, scale):
            continue
        w2 = node.weights[w2_attr]
        axes2 = adapter.kernel_axes(node)
        assert axes2 is not None  # a linear layer holding its kernel
        factors = input_channel_factors(w2, axes2, g2, scale)
        node.set_weight(w2_attr, (w2 / factors).astype(w2.dtype))
        done += 1
    return done
