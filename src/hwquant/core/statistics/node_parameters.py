"""Writing quantization parameters and biases into nodes, and (re)collecting tensor statistics: the
steps the pipeline and the graph corrections (core/passes) share. Both import this module; it imports
neither, so the passes need no late imports of the pipeline."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from hwquant.constants import LUT_VALUES_BITWIDTH, RANGE_MAX, RANGE_MIN
from hwquant.core.statistics.consumer_error import ValueMap
from hwquant.core.pipeline.distributed import statistics_pass
from hwquant.core.graph.framework_adapter import FrameworkAdapter
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.graph.node_quantization_config import NodeQuantizationConfig
from hwquant.core.statistics.parameter_search import activation_quantization_params, weights_quantization_params
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.tpc.enums import QuantizationMethod


def collect_statistics(graph: Graph, adapter: FrameworkAdapter, statistics: Dict[str, TensorStatistics],
                       names: List[str], data: Iterable[List[Any]]) -> int:
    """(Re)collect the statistics of `names` into `statistics`: one pass over `data`; returns the number
    of batches. Per-channel figures (for bias correction, shift-negative, equalization) wherever there is a
    channel axis."""
    axis = adapter.activation_channel_axis
    shapes = {n: graph.node(n).output_shape for n in names}
    fresh = {n: TensorStatistics(channel_axis=axis, per_channel=isinstance(s, tuple) and len(s) >= 2)
             for n, s in shapes.items()}
    # (across processes: each rank's batches, every summary added on every rank in global order)
    batches = statistics_pass(adapter.collective, fresh, data,
                              lambda stats, batches: adapter.collect_statistics(graph, stats, batches)) if names else 0
    statistics.update(fresh)
    return batches


def set_activation_params(config: NodeQuantizationConfig, stats: TensorStatistics,
                          value_map: Optional[ValueMap] = None,
                          output_range: Optional[Tuple[Optional[float], Optional[float]]] = None) -> None:
    """The activation's quantization parameters from its statistics; ``value_map``: the element-wise
    function its readers apply, to judge the error after it (core/statistics/consumer_error.py); ``output_range``:
    the range its operator bounds it to (the adapter's ``output_range``), which no statistic narrows."""
    a = config.activation_quantization_cfg
    if not a.quantized:
        return
    if a.fixed_scale is not None:  # a fixed scale / zero point (signed integer convention) as a uniform range
        a.activation_quantization_method = QuantizationMethod.UNIFORM
        lo_int, hi_int = -2 ** (a.activation_n_bits - 1), 2 ** (a.activation_n_bits - 1) - 1
        zp = a.fixed_zero_point or 0
        a.activation_quantization_params = {RANGE_MIN: (lo_int - zp) * a.fixed_scale, RANGE_MAX: (hi_int - zp) * a.fixed_scale}
        return
    a.activation_quantization_params = activation_quantization_params(
        a.activation_quantization_method, a.activation_n_bits, a.activation_error_method, stats,
        signedness=a.signedness, min_threshold=a.min_threshold, l_p_value=a.l_p_value, z_threshold=a.z_threshold,
        value_map=value_map, pot_clip_tolerance=a.pot_clip_tolerance, output_range=output_range)


def set_weights_params(config: NodeQuantizationConfig, weights: Dict[Any, np.ndarray],
                       attrs: Optional[Sequence[Any]] = None) -> None:
    """The quantization parameters of the config's quantized weights (only ``attrs`` when given) from
    ``weights``."""
    wq = config.weights_quantization_cfg
    for attr, w in wq.attrs.items():
        if not w.enable_weights_quantization or attr not in weights or attrs is not None and attr not in attrs:
            continue
        per_channel = w.weights_per_channel_threshold and w.weights_channels_axis is not None
        w.weights_quantization_params = weights_quantization_params(
            w.weights_quantization_method, w.weights_n_bits, w.weights_error_method, weights[attr],
            w.weights_channels_axis if per_channel else None, per_channel, min_threshold=wq.min_threshold,
            l_p_value=w.l_p_value, lut_values_bitwidth=w.lut_values_bitwidth or LUT_VALUES_BITWIDTH)


def set_bias(node: Node, adapter: FrameworkAdapter, bias: np.ndarray) -> None:
    """Write a linear layer's bias (giving the layer one where it has none) and, if the bias is
    quantized, refresh its quantization parameters (only the bias's: the kernel's may be learned)."""
    bias_attr = adapter.bias_attr(node)
    if bias_attr in node.weights:
        node.set_weight(bias_attr, np.asarray(bias).astype(node.weights[bias_attr].dtype))
    else:
        kernel_attr = adapter.kernel_attr(node)
        assert kernel_attr is not None  # a linear layer (the only kind with a bias to set) has a kernel
        kernel = node.weights[kernel_attr]
        adapter.set_linear_layer(node, kernel, np.asarray(bias).astype(kernel.dtype))
    bias_cfg = node.final_config.weights_quantization_cfg.attrs.get(bias_attr)
    if bias_cfg is not None and bias_cfg.enable_weights_quantization:
        set_weights_params(node.final_config, node.weights, attrs=[bias_attr])


def restore_biases(graph: Graph, adapter: FrameworkAdapter, biases: Dict[str, Optional[np.ndarray]]) -> None:
    """Set each named layer's bias back to ``biases[name]``; None (the layer had none): a zero bias,
    if it has got one since (the same function)."""
    for name, bias in biases.items():
        node = graph.node(name)
        bias_attr = adapter.bias_attr(node)
        current = None if bias_attr is None else node.weights.get(bias_attr)
        if bias is not None or current is not None:
            set_bias(node, adapter, bias if bias is not None else np.zeros_like(current))


def add_to_bias(node: Node, adapter: FrameworkAdapter, shift: np.ndarray) -> None:
    """Shift a linear layer's bias by ``shift`` (a layer without one gets ``shift``): see set_bias."""
    bias_attr = adapter.bias_attr(node)
    bias = None if bias_attr is None else node.weights.get(bias_attr)
    set_bias(node, adapter, shift if bias is None else bias + shift)
