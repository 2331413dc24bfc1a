"""Turn the quantizer markers of an exported graph into real ONNX.

* :func:`lower_markers_to_qdq`: standard QuantizeLinear / DequantizeLinear. Constant weights are
  quantized here, with ``core.quant_math`` on the quantizer's own grid, and stored as integers
  feeding a DequantizeLinear (per-axis for per-channel grids). Grids narrower than their integer
  type (e.g. 4 bits in int8) get an integer Clip; widths the opset has no type for (16 bits before
  opset 21) become the same arithmetic in float ops (Div, Round, Clip, Mul), exact but not int8.
* :func:`lower_markers_to_mctq`: the ``mct_quantizers`` custom ops and their attributes.
* :func:`lower_mctq_to_qdq`: an ``mct_quantizers`` graph (ours or another tool's) back to standard
  ops, so that plain ONNX Runtime runs it (:func:`hwquant.exporter.mctq_inference_session`).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple, Type

import numpy as np
import onnx

from hwquant.core.numerics import quant_math
from hwquant.errors import ExportError
from hwquant.exporter.onnx_graph import GraphEditor, attrs_of, opset_of, set_domain
from hwquant.exporter.quantizer_spec import ACTIVATION, MARKER_DOMAIN, WEIGHTS, QuantizerSpec

log = logging.getLogger("hwquant.exporter")

MCTQ_DOMAIN = "mct_quantizers"
# The mct_quantizers release whose op names and attributes these files follow.
MCTQ_FORMAT_VERSION = "1.7.0"

# (numpy dtype, first opset with that QuantizeLinear type).
_INT_TYPES: List[Tuple[Type[np.integer], int]] = [(np.uint8, 10), (np.int8, 10), (np.uint16, 21), (np.int16, 21)]


def integer_type(qmin: int, qmax: int, opset: int):
    """The smallest ONNX integer type holding [qmin, qmax] that this opset's QuantizeLinear knows."""
    for dtype, since in _INT_TYPES:
        info = np.iinfo(dtype)
        if info.min <= qmin and qmax <= info.max and opset >= since:
            return dtype
    return None


def activation_int_range(grid: quant_math.AffineGrid):
    """(zero point, qmin, qmax) of an activation grid moved to start at 0: the same grid (shifting the
    zero point shifts every integer alike), stored unsigned. One activation type for the whole model
    lets ONNX Runtime fuse every Conv / Add (its integer kernels want input and output of one type),
    and uint8 activations with int8 weights are the fast path of its x86 kernels."""
    return np.asarray(grid.zero_point, np.float64) - grid.qmin, 0, grid.qmax - grid.qmin


def _marker_spec(node: onnx.NodeProto) -> QuantizerSpec:
    return QuantizerSpec.from_json(attrs_of(node)["spec"].decode())


def _channel_shape(axis: Optional[int], rank: Optional[int]) -> Optional[List[int]]:
    if axis is None:
        return None
    if rank is None:
        raise ExportError("a per-channel quantizer on a tensor of unknown rank cannot be exported")
    return [-1 if d == axis % rank else 1 for d in range(rank)]


def _constant_fields(mctq_op: str) -> Tuple[str, ...]:
    """The figures of an mct_quantizers op (its constant inputs for weights, attributes for activations)."""
    if "UNIFORM" in mctq_op.upper():
        return "min_range", "max_range"
    return ("lut_values", "threshold") if "LUT" in mctq_op.upper() else ("threshold",)


def _qdq_nodes(ed: GraphEditor, spec: QuantizerSpec, x: str, y: str, opset: int, where: str) -> List[onnx.NodeProto]:
    grid = spec.grid()
    weight = ed.constant(x) if spec.target == WEIGHTS else None
    if spec.is_lut:  # no standard op for a table: store the snapped float weights
        assert isinstance(grid, quant_math.LutGrid)
        if weight is None:
            raise ExportError(f"{where}: a lookup-table quantizer on a computed tensor has no standard ONNX form; "
                              "export with quantization_format=MCTQ")
        ed.add_initializer(quant_math.lut_fake_quantize(weight.astype(np.float32), grid).astype(np.float32), y, name=y)
        return []
    assert isinstance(grid, quant_math.AffineGrid)  # every other method's grid is affine
    zero_point, qmin, qmax = (grid.zero_point, grid.qmin, grid.qmax) if spec.target == WEIGHTS \
        else activation_int_range(grid)
    dtype = integer_type(qmin, qmax, opset)
    per_channel = grid.axis is not None
    scale = np.asarray(grid.scale, np.float32).reshape(-1 if per_channel else ())
    axis_attr: Dict[str, Any] = {"axis": grid.axis} if per_channel else {}
    if dtype is not None and per_channel and opset < 13:
        dtype = None  # per-axis QuantizeLinear / DequantizeLinear need opset 13
    if dtype is not None:
        zp = np.asarray(zero_point).reshape(scale.shape).astype(dtype)
        if weight is not None:  # a constant weight (its zero point is its grid's): stored as integers
            q = quant_math.quantize(weight.astype(np.float32), grid).astype(dtype)
            return [ed.node("DequantizeLinear", [ed.add_initializer(q, f"{x}_quantized"),
                                                 ed.add_initializer(scale, f"{x}_scale"),
                                                 ed.add_initializer(zp, f"{x}_zero_point")], [y], **axis_attr)]
        s, z = ed.add_initializer(scale, f"{y}_scale"), ed.add_initializer(zp, f"{y}_zero_point")
        q = ed.fresh(f"{y}_q")
        nodes = [ed.node("QuantizeLinear", [x, s, z], [q], **axis_attr)]
        info = np.iinfo(dtype)
        if (qmin, qmax) != (info.min, info.max):
            if np.dtype(dtype).itemsize > 1:
                dtype = None  # ONNX Runtime's Clip has no 16-bit kernels: float arithmetic below
            else:
                lo, hi = (ed.add_initializer(np.asarray(v, dtype), f"{y}_{n}") for v, n in ((qmin, "qmin"), (qmax, "qmax")))
                clipped = ed.fresh(f"{y}_q_clipped")
                nodes.append(ed.node("Clip", [q, lo, hi], [clipped]))
                q = clipped
        if dtype is not None:
            return nodes + [ed.node("DequantizeLinear", [q, s, z], [y], **axis_attr)]
    # Float fake quantization, the very operations of quant_math: round(x / s) + zp, clip, (q - zp) * s.
    log.warning("%s: no ONNX %d-bit integer type at opset %d; writing its fake quantization in float ops "
                "(exact, but not run with integer kernels; opset 21 has 16-bit types)", where, spec.num_bits, opset)
    shape = _channel_shape(grid.axis, None if weight is None else weight.ndim)
    as_const = (lambda v: np.asarray(v, np.float32) if shape is None else np.asarray(v, np.float32).reshape(shape))
    s = ed.add_initializer(as_const(grid.scale), f"{y}_scale")
    zp_values = np.asarray(grid.zero_point, np.float64)
    zp_in = [ed.add_initializer(as_const(zp_values), f"{y}_zero_point")] if np.any(zp_values != 0) else []
    lo, hi = (ed.add_initializer(np.asarray(v, np.float32), f"{y}_{n}") for v, n in ((grid.qmin, "qmin"), (grid.qmax, "qmax")))
    add: List[Tuple[str, List[str]]] = [("Add", zp_in)] if zp_in else []  # a zero point of zeros: no Add / Sub
    sub: List[Tuple[str, List[str]]] = [("Sub", zp_in)] if zp_in else []
    steps = [("Div", [s]), ("Round", []), *add, ("Clip", [lo, hi]), *sub, ("Mul", [s])]
    nodes, value = [], x
    for i, (op, operands) in enumerate(steps):
        out = y if i == len(steps) - 1 else ed.fresh(f"{y}_t{i}")
        nodes.append(ed.node(op, [value, *operands], [out]))
        value = out
    return nodes


def lower_markers_to_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    ed, opset = GraphEditor(model), opset_of(model)
    for node in [n for n in ed.nodes if n.domain == MARKER_DOMAIN]:
        ed.replace(node, _qdq_nodes(ed, _marker_spec(node), node.input[0], node.output[0], opset, node.name))
    ed.commit()
    set_domain(model, MARKER_DOMAIN, None)
    return model


def lower_markers_to_mctq(model: onnx.ModelProto) -> onnx.ModelProto:
    ed = GraphEditor(model)
    for node in [n for n in ed.nodes if n.domain == MARKER_DOMAIN]:
        spec = _marker_spec(node)
        fields = spec.mctq_fields()
        attrs = {"num_bits": fields["num_bits"], "signed": fields["signed"], "mctq_version": MCTQ_FORMAT_VERSION}
        inputs = [node.input[0]]
        const_names = _constant_fields(spec.mctq_op())
        if spec.target == ACTIVATION:
            attrs.update({k: float(fields[k]) for k in const_names})
        else:  # weights: thresholds / ranges / table as float constant inputs, like mct_quantizers
            inputs += [ed.add_initializer(np.asarray(fields[k], np.float32), f"{node.input[0]}_{k}") for k in const_names]
            attrs.update(per_channel=int(spec.axis is not None), channel_axis=0 if spec.axis is None else spec.axis)
            if spec.is_lut:
                weight = ed.constant(node.input[0])
                attrs.update(lut_values_bitwidth=fields["lut_values_bitwidth"], eps=1e-8,
                             input_rank=-1 if weight is None else weight.ndim)
        ed.replace(node, [ed.node(spec.mctq_op(), inputs, node.output, domain=MCTQ_DOMAIN, **attrs)])
    ed.commit()
    set_domain(model, MARKER_DOMAIN, None)
    set_domain(model, MCTQ_DOMAIN, 1)
    return model


def lower_mctq_to_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite every ``mct_quantizers`` node into standard ops (in place; returns the model)."""
    ed, opset = GraphEditor(model), opset_of(model)
    for node in [n for n in ed.nodes if n.domain == MCTQ_DOMAIN]:
        fields = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs_of(node).items()}
        if node.op_type.startswith("Weights"):
            for name, inp in zip(_constant_fields(node.op_type), node.input[1:]):
                value = ed.constant(inp)
                if value is None:
                    raise ExportError(f"mct_quantizers node '{node.name}': input '{inp}' ({name}) is not a constant")
                fields[name] = value.astype(np.float64).reshape(-1).tolist() if value.size > 1 or fields.get("per_channel") \
                    else float(value)
        try:
            spec = QuantizerSpec.from_mctq(node.op_type, fields)
        except (KeyError, ValueError) as e:
            raise ExportError(f"mct_quantizers node '{node.name}' ({node.op_type}) cannot be read: {e}") from None
        ed.replace(node, _qdq_nodes(ed, spec, node.input[0], node.output[0], opset, node.name))
    ed.commit()
    set_domain(model, MCTQ_DOMAIN, None)
    return model
