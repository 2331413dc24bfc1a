"""Shift-negative activation correction (MCT's SNC).

Activations such as SiLU / Swish, GELU, HardSwish, ELU, PReLU and LeakyReLU have a small negative
tail (SiLU's minimum is about -0.28). A signed symmetric / power-of-two grid spends half its levels
on that tail. When

    stats.min < 0   and   |stats.min| / threshold <= shift_negative_ratio

the activation's output is shifted by a constant c (the smallest point k * t / 2**n of the unsigned
grid that is >= |min|), so the tensor becomes non-negative and is quantized on the unsigned grid
with the same threshold t (twice the resolution); the following linear layer (a convolution or a
dense layer, possibly behind ops that commute with a shift: reshape, flatten, dropout, max-pooling)
absorbs the shift in its bias:

    L(x + c) = L(x) + c * sum(W over all but the output axis)   =>   b' = b - c * sum(W, ...).

If that layer zero-pads, its padding would see 0 instead of the shifted 0 (= c): the padding is
moved into a new constant pad node (value c) in front of it and the layer pads no more (as MCT).
The graph computes the same float function; `apply_shift_negative_correction` edits it as:

    act -> [bypass ops] -> layer      becomes      act -> add(c) -> [bypass ops] -> [pad(c)] -> layer

- the new add node takes over the activation's quantizer: the activation's config with
  signedness UNSIGNED and params {threshold: t, signed: False}, or, with
  `shift_negative_threshold_recalculation`, params recomputed from the shifted statistics;
- the activation's own output: where the target needs every kernel's output quantized (the IMX500:
  its converter refuses a Conv -> SiLU group whose output has no quantizer), it stays quantized at
  16 bits with the parameters computed for its own width (as MCT); where the TPC offers no 16-bit activation
  for it there, the activation is not shifted (at its own width the shift would gain nothing).
  Elsewhere it is no longer quantized (near-float, as MCT's 16 bits) and joins the add in a fused group;
- statistics: the add node, the bypass ops and the pad node have new tensors; their statistics
  are derived from the collected ones (x + c: `TensorStatistics.shifted`; a pad also gets its
  border of c), so every statistics entry describes the graph as it now is (bias correction then
  reads the layer's shifted input mean), and the bypass ops' quantization parameters are
  recomputed from them (they become unsigned). Only a pad whose border size varies between
  batches, or whose input was not observed, is collected again (one pass over `data`).

Runs after `compute_parameters` (it needs the activation's threshold), before bias correction.
Acts per node, where the final config says shift_negative_activation_correction (copied from
QuantizationConfig), for POWER_OF_TWO and SYMMETRIC activation quantizers (not UNIFORM, which
already fits an asymmetric range, nor LUT), and skips activations whose output has several readers,
is a model output, or does not reach a linear layer.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from hwquant.constants import IMX500_TPC, SIGNED, THRESHOLD
from hwquant.core.graph.framework_adapter import FrameworkAdapter, spatial_axes
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.graph.node_quantization_config import NodeQuantizationConfig, NodeWeightsQuantizationConfig
from hwquant.core.statistics.node_parameters import collect_statistics, set_activation_params, set_weights_params
from hwquant.core.passes.linear_collapsing import single_reader
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.tpc.enums import QuantizationMethod, Signedness

log = logging.getLogger("hwquant.passes")

# Canonical activation names (FrameworkAdapter.activation_info) with a small negative range.
SNC_ACTIVATIONS = frozenset({"silu", "swish", "gelu", "hardswish", "elu", "celu", "selu", "mish", "prelu",
                             "leaky_relu"})
_SHIFTABLE_METHODS = (QuantizationMethod.POWER_OF_TWO, QuantizationMethod.SYMMETRIC)
# Bit width of the shifted activation's own output where the target needs it quantized (MCT's choice).
NEAR_FLOAT_BITS = 16
# Platforms whose compiler needs every kernel's output quantized (a fused kernel -> activation group
# included), so the activation in front of the shift cannot be left float.
_QUANTIZED_KERNEL_OUTPUT_PLATFORMS = frozenset({IMX500_TPC})


@dataclasses.dataclass
class _Plan:
    act: Node
    bypass: List[Node]
    layer: Node
    shift: float
    threshold: float


def shift_value(minimum: float, threshold: float, n_bits: int) -> Optional[float]:
    """The smallest point of the unsigned n-bit grid of `threshold` that is >= -minimum (None if
    the grid has none)."""
    lsb = threshold / 2 ** n_bits
    k = math.ceil(-minimum / lsb - 1e-9)
    k = max(k, 0)
    while k * lsb < -minimum:  # guard the float division
        k += 1
    return None if k > 2 ** n_bits - 1 else k * lsb


@dataclasses.dataclass
class _Context:
    """What the pass reads and changes."""
    graph: Graph
    adapter: FrameworkAdapter
    statistics: Dict[str, TensorStatistics]
    fqc: Any  # the attached TPC (None: every operator allowed)
    fused_groups: List[List[str]]


def _plan(ctx: _Context, act: Node) -> Optional[_Plan]:
    graph, adapter = ctx.graph, ctx.adapter
    info = adapter.activation_info(act)
    cfg = act.final_config
    if info is None or info.name not in SNC_ACTIVATIONS or cfg is None:
        return None
    a = cfg.activation_quantization_cfg
    if not (a.quantized and a.shift_negative_activation_correction and a.fixed_scale is None
            and a.activation_quantization_method in _SHIFTABLE_METHODS):
        return None
    stats, t = ctx.statistics.get(act.name), a.activation_quantization_params.get(THRESHOLD)
    if stats is None or stats.count == 0 or t is None:
        return None
    t = float(t)
    if not stats.min < 0 or -stats.min / t > a.shift_negative_ratio:
        return None
    prev, node, bypass = act, single_reader(graph, act), []
    while node is not None and node.inputs == [prev.name] and adapter.commutes_with_shift(node):
        bypass.append(node)
        prev, node = node, single_reader(graph, node)
    if node is None or node.inputs != [prev.name]:
        return None
    g = adapter.linear_geometry(node)
    if g is None or g.kind not in ("dense", "conv") or adapter.kernel_attr(node) not in node.weights \
            or adapter.bias_attr(node) is None:
        return None
    shift = shift_value(stats.min, t, a.activation_n_bits)
    if shift is None:
        return None
    return _Plan(act, bypass, node, shift, t)


def _tpc_allows(ctx: _Context, node: Node, n_bits: int) -> bool:
    """Whether the TPC offers `n_bits`-bit quantized activations for `node`'s operator (MCT requires the
    activation's width of the Add); True when there is no attached TPC."""
    if ctx.fqc is None:
        return True
    qco = ctx.fqc.get_qco(node.type, node.framework_attr)
    return any(o.enable_activation_quantization and o.activation_n_bits == n_bits
               for o in qco.quantization_configurations)


def _needs_quantized_output(ctx: _Context) -> bool:
    return ctx.fqc is not None and ctx.fqc.tpc.tpc_platform_type in _QUANTIZED_KERNEL_OUTPUT_PLATFORMS


def _new_config(template: NodeQuantizationConfig, quantized: bool) -> NodeQuantizationConfig:
    activation = copy.deepcopy(template.activation_quantization_cfg)
    activation.enable_activation_quantization = quantized
    activation.activation_quantization_params = {}
    return NodeQuantizationConfig(activation, NodeWeightsQuantizationConfig(
        min_threshold=template.weights_quantization_cfg.min_threshold), op_config=None)


def _set_configs(node: Node, config: NodeQuantizationConfig, ctx: _Context) -> None:
    node.candidates = [config]
    node.final_config = config.clone()
    if ctx.fqc is not None:
        node.opset = ctx.fqc.opset_of(node.type, node.framework_attr)


def _padded_shape(shape: Any, padding, channel_axis: int) -> Any:
    if not isinstance(shape, tuple) or len(shape) != 2 + len(padding):
        return shape
    out = list(shape)
    for axis, (lo, hi) in zip(spatial_axes(len(shape), channel_axis), padding):
        out[axis] += lo + hi
    return tuple(out)


def _apply(ctx: _Context, plan: _Plan) -> Tuple[Node, Optional[Node]]:
    graph, adapter = ctx.graph, ctx.adapter
    act, layer, c = plan.act, plan.layer, plan.shift
    # 1. act -> add(c)
    add = adapter.add_constant_node(graph.unique_name(f"{act.name}_shift"), act.name, c, act.output_shape)
    add.module_path = act.module_path
    add_cfg = _new_config(act.final_config, quantized=True)
    add_cfg.activation_quantization_cfg.signedness = Signedness.UNSIGNED
    add_cfg.activation_quantization_cfg.activation_quantization_params = {THRESHOLD: plan.threshold, SIGNED: False}
    graph.insert_after(act, add)
    _set_configs(add, add_cfg, ctx)
    # 2. the layer absorbs the shift; a zero padding moves into a pad node of value c
    g, pad = adapter.linear_geometry(layer), None
    kernel_attr, bias_attr = adapter.kernel_attr(layer), adapter.bias_attr(layer)
    axes = adapter.kernel_axes(layer)
    # the plan's layer is a dense / conv layer holding its kernel, with a bias attribute (checked where the plan is made)
    assert g is not None and kernel_attr is not None and axes is not None and bias_attr is not None
    w = layer.weights[kernel_attr]
    out_axis = axes[0]
    absorbed = c * np.asarray(w, np.float64).sum(axis=tuple(i for i in range(w.ndim) if i != out_axis))
    bias = layer.weights.get(bias_attr)
    new_bias = ((0.0 if bias is None else np.asarray(bias, np.float64)) - absorbed).astype(w.dtype)
    if g.kind == "conv" and g.has_padding and g.zero_padding:
        reader_of = graph.node(layer.inputs[0])
        pad = adapter.pad_node(graph.unique_name(f"{layer.name}_pad"), reader_of.name, g.padding, c,
                               _padded_shape(reader_of.output_shape, g.padding, adapter.activation_channel_axis))
        pad.module_path = layer.module_path
        graph.insert_after(reader_of, pad)
        _set_configs(pad, _new_config(act.final_config, quantized=False), ctx)
        g = dataclasses.replace(g, padding=tuple((0, 0) for _ in g.padding))
        adapter.set_linear_layer(layer, w, new_bias, g)
    elif bias is None:
        adapter.set_linear_layer(layer, w, new_bias)
    else:
        layer.set_weight(bias_attr, new_bias)
    # 3. the activation's own output: kept quantized where the target needs it, else fused into the add
    if _needs_quantized_output(ctx):
        # its parameters stay those computed for its own width, as MCT keeps them: recomputed for 16 bits they
        # lost 2.1 dB of output SQNR on PP-OCR's hard-swish classifier (benchmarks/run_snc_imx500.py)
        for cfg in [*act.candidates, act.final_config]:
            cfg.activation_quantization_cfg.activation_n_bits = NEAR_FLOAT_BITS
        act.candidates = [act.final_config.clone()]
        return add, pad
    for cfg in [*act.candidates, act.final_config]:
        cfg.activation_quantization_cfg.enable_activation_quantization = False
    for node in graph:
        if node.fused_into == act.name:
            node.fused_into = add.name
    act.fused_into = add.name
    group = next((grp for grp in ctx.fused_groups if act.name in grp), None)
    if group is not None:
        group.insert(group.index(act.name) + 1, add.name)
    else:
        ctx.fused_groups.append([act.name, add.name])
    return add, pad


def _shift_statistics(ctx: _Context, plan: _Plan, add: Node, pad: Optional[Node], uniform_shapes: bool) -> List[str]:
    """The statistics of the tensors the shift created or moved, derived from those collected (the
    add and the bypass ops hold x + c; a pad node also its border of c), so that no pass over the
    data is needed. Returns the names that could not be derived (to collect from data): a pad
    whose border size varies (calibration batches of several sizes) or whose input was not observed."""
    stats, c = ctx.statistics, plan.shift
    stats[add.name] = stats[plan.act.name].shifted(c)
    for node in plan.bypass:
        if node.name in stats:
            stats[node.name] = stats[node.name].shifted(c)
    if pad is None:
        return []
    source = stats.get(pad.inputs[0])
    shape_in, shape_out = ctx.graph.node(pad.inputs[0]).output_shape, pad.output_shape
    if not (uniform_shapes and source is not None and source.count
            and isinstance(shape_in, tuple) and isinstance(shape_out, tuple) and len(shape_in) == len(shape_out) > 2
            and all(isinstance(d, int) for d in shape_in[1:] + shape_out[1:])):
        return [pad.name]
    spatial = spatial_axes(len(shape_in), ctx.adapter.activation_channel_axis)
    channels = shape_in[ctx.adapter.activation_channel_axis]
    area_in, area_out = (math.prod(shape[a] for a in spatial) for shape in (shape_in, shape_out))
    samples = source.count // channels // area_in
    stats[pad.name] = source.shifted(0.0).add_constant(c, samples * channels * (area_out - area_in))
    return []


def apply_shift_negative_correction(graph: Graph, adapter: FrameworkAdapter, statistics: Dict[str, TensorStatistics],
                                    fqc: Any, fused_groups: List[List[str]], data: Iterable[List[Any]]) -> int:
    """Shift every eligible activation (see the module docstring); returns how many. `data` is the
    representative data, iterated once more only for a pad whose statistics cannot be derived
    (see _shift_statistics). Needs the final configs' activation parameters; adds the shifting nodes to
    ``fused_groups`` and their statistics to ``statistics``."""
    ctx = _Context(graph, adapter, statistics, fqc, fused_groups)

    adds, bypassed, layers, recollect, no_wide_grid = [], [], [], [], []
    for act in ctx.graph:
        plan = _plan(ctx, act)
        if plan is None:
            continue
        n_bits = act.final_config.activation_quantization_cfg.activation_n_bits
        probe = ctx.adapter.add_constant_node("probe", act.name, plan.shift, act.output_shape)
        if not _tpc_allows(ctx, probe, n_bits):
            log.info("shift-negative correction skips '%s': the TPC does not quantize its Add with %d bits",
                     act.name, n_bits)
            continue
        if _needs_quantized_output(ctx) and not _tpc_allows(ctx, act, NEAR_FLOAT_BITS):
            no_wide_grid.append(act.name)  # its output stays quantized at its own width: the shift gains nothing
            continue
        add, pad = _apply(ctx, plan)
        adds.append(add)
        bypassed += [n for n in plan.bypass if n.final_config is not None
                     and n.final_config.activation_quantization_cfg.quantized]
        layers.append(plan.layer)
        recollect += _shift_statistics(ctx, plan, add, pad, getattr(data, "uniform_shapes", False))
    if no_wide_grid:
        log.info("shift-negative correction skips %d activation(s) (%s): platform '%s' needs their output quantized "
                 "and the TPC offers no %d-bit activation for them", len(no_wide_grid),
                 ", ".join(no_wide_grid[:5]) + (" ..." if len(no_wide_grid) > 5 else ""),
                 ctx.fqc.tpc.tpc_platform_type, NEAR_FLOAT_BITS)
    if not adds:
        return 0
    if _needs_quantized_output(ctx):  # then _apply kept every shifted activation's output at 16 bits
        log.info("shift-negative correction keeps the output of %d of %d shifted activations quantized (%d bits): "
                 "platform '%s' needs every kernel's output quantized", len(adds), len(adds), NEAR_FLOAT_BITS,
                 ctx.fqc.tpc.tpc_platform_type)
    if recollect:
        collect_statistics(ctx.graph, ctx.adapter, ctx.statistics, recollect, data)
    for add in adds:
        a = add.final_config.activation_quantization_cfg
        if a.shift_negative_threshold_recalculation:
            set_activation_params(add.final_config, ctx.statistics[add.name])
            add.candidates = [add.final_config.clone()]
    for node in bypassed:
        set_activation_params(node.final_config, ctx.statistics[node.name])
    for layer in layers:
        bias_cfg = layer.final_config.weights_quantization_cfg.attrs.get(ctx.adapter.bias_attr(layer)) \
            if layer.final_config is not None else None
        if bias_cfg is not None and bias_cfg.enable_weights_quantization:
            set_weights_params(layer.final_config, layer.weights)
    return len(adds)
