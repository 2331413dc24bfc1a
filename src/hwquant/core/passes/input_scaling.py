"""Input scaling (MCT's `input_scaling`).

A model input quantized with a threshold t (power-of-two or symmetric) whose data only reach
m = max(|min|, |max|) < t wastes the grid's levels between m and t. When every path from the input
leads to a linear layer (convolution, transposed convolution, dense), possibly through zero
padding / pooling / dropout, the input can be scaled by s = t / m to fill the grid: each of those
layers' kernels is multiplied by m / t, so the float function of the scaled input is unchanged.
As in MCT, the scaling itself is not put into the model: the quantized model expects its input
multiplied by s, which the run's report (`PipelineReport.input_scale`) records per input (MCT reports it as
UserInformation.input_scale) for the caller to apply in pre-processing.

Where input scaling cannot be applied exactly (the input feeds a non-linear op, a model output, or
its quantizer has no threshold), `apply_input_scaling` raises InvalidConfigError explaining why;
`check_input_scaling` raises the same error before calibration.

Runs after `compute_parameters` (it needs the input's threshold); the layers' weight parameters
are recomputed, and the input's statistics are replaced by the scaled ones (so bias correction
sees the scaled input mean).
"""
from __future__ import annotations

import copy
from typing import Dict, List

from hwquant.constants import THRESHOLD
from hwquant.core.graph.framework_adapter import FrameworkAdapter
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.statistics.node_parameters import set_weights_params
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.errors import InvalidConfigError
from hwquant.tpc.enums import QuantizationMethod

_THRESHOLD_METHODS = (QuantizationMethod.POWER_OF_TWO, QuantizationMethod.SYMMETRIC)


def _describe(node: Node) -> str:
    t = getattr(node.type, "__name__", str(node.type))
    return f"'{node.name}' ({t})"


def scaled_layers(graph: Graph, adapter: FrameworkAdapter, inp: Node) -> List[Node]:
    """The linear layers whose kernels absorb a scaling of the input `inp`; raises
    InvalidConfigError if some reader of the input is not (behind scale-commuting ops) a linear layer."""
    layers: List[Node] = []
    frontier = [inp]
    while frontier:
        node = frontier.pop()
        if graph.is_output(node):
            raise InvalidConfigError(
                f"input_scaling=True: input '{inp.name}' reaches the model output through {_describe(node)} "
                f"without a linear layer; scaling the input would scale that output. Set "
                f"QuantizationConfig(input_scaling=False)")
        readers = graph.successors(node)
        if not readers and node is inp:
            raise InvalidConfigError(f"input_scaling=True: input '{inp.name}' is not read by any layer")
        for reader in readers:
            if adapter.linear_geometry(reader) is not None and reader.inputs == [node.name] \
                    and adapter.kernel_attr(reader) in reader.weights:
                if reader not in layers:
                    layers.append(reader)
            elif adapter.commutes_with_channel_scale(reader) and reader.inputs == [node.name]:
                frontier.append(reader)
            else:
                raise InvalidConfigError(
                    f"input_scaling=True: input '{inp.name}' feeds {_describe(reader)}, which is not a linear layer "
                    f"(convolution / dense, possibly behind zero padding or pooling). Input scaling multiplies the "
                    f"input by t / max|x| and divides the kernels of the layers reading it by the same factor, which "
                    f"is exact only when every reader of the input is linear. Set QuantizationConfig("
                    f"input_scaling=False), or feed the input to a convolution / dense layer first")
    return layers


def check_input_scaling(graph: Graph, adapter: FrameworkAdapter) -> None:
    """Raise InvalidConfigError now (before calibration) for an input where input scaling cannot
    apply. Call in `prepare` when QuantizationConfig.input_scaling is set."""
    for inp in graph.input_nodes:
        if any(c.activation_quantization_cfg.quantized for c in inp.candidates) or not inp.candidates:
            scaled_layers(graph, adapter, inp)


def scale_statistics(stats: TensorStatistics, factor: float) -> TensorStatistics:
    """The statistics of the tensor multiplied by `factor` (> 0): a copy with every value, the
    histogram's bin width included, scaled (exact: the bin edges stay at integer multiples of the
    width)."""
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor!r}")
    out = copy.deepcopy(stats)
    for name in ("_mean", "_min", "_max", "_w"):
        setattr(out, name, getattr(out, name) * factor)
    out._m2 = out._m2 * factor ** 2
    for name in ("_ch_min", "_ch_max", "_ch_sum"):
        v = getattr(out, name)
        if v is not None:
            setattr(out, name, v * factor)
    return out


def apply_input_scaling(graph: Graph, adapter: FrameworkAdapter,
                        statistics: Dict[str, TensorStatistics]) -> Dict[str, float]:
    """Scale every quantized input whose threshold exceeds its data range (see the module
    docstring); returns {input: the factor its data is multiplied by} for the inputs scaled. Apply when
    QuantizationConfig.input_scaling is set."""
    scales: Dict[str, float] = {}
    for inp in graph.input_nodes:
        cfg = inp.final_config
        if cfg is None or not cfg.activation_quantization_cfg.quantized:
            continue
        a = cfg.activation_quantization_cfg
        layers = scaled_layers(graph, adapter, inp)
        t = a.activation_quantization_params.get(THRESHOLD)
        if a.activation_quantization_method not in _THRESHOLD_METHODS or t is None:
            raise InvalidConfigError(
                f"input_scaling=True: input '{inp.name}' is quantized with {a.activation_quantization_method.name}, "
                f"which has no threshold to fill; input scaling applies to POWER_OF_TWO and SYMMETRIC input "
                f"quantizers. Set QuantizationConfig(input_scaling=False)")
        stats = statistics.get(inp.name)
        if stats is None or stats.count == 0:
            continue
        reach = max(abs(stats.min), abs(stats.max))
        if not 0 < reach < float(t):
            continue
        factor = reach / float(t)  # kernels are multiplied by it, the input by 1 / factor
        for layer in layers:
            attr = adapter.kernel_attr(layer)
            assert attr is not None  # scaled_layers keeps only layers holding their kernel
            w = layer.weights[attr]
            layer.set_weight(attr, (w * factor).astype(w.dtype))
            for c in [*layer.candidates, layer.final_config]:
                if c is not None and any(wc.weights_quantization_params
                                         for wc in c.weights_quantization_cfg.attrs.values()):
                    set_weights_params(c, layer.weights)
        statistics[inp.name] = scale_statistics(stats, 1.0 / factor)
        scales[inp.name] = 1.0 / factor
    return scales
