"""Rewrites of a QDQ graph that let ONNX Runtime run it with integer kernels, each exact with
respect to the simulated model (or, for biases, within a rounding far below one output step).

ONNX Runtime fuses ``DequantizeLinear -> Conv/Gemm/Add/Pool -> QuantizeLinear`` groups into integer
kernels (QLinearConv, QGemm, QLinearAdd, ...). The simulated model does not always have that shape:

* A Conv fused with its activation (ReLU, ReLU6: no quantizer between them) ends in
  ``Conv -> Relu/Clip -> Q``. When the activation's bounds are points of the grid, clipping commutes
  with quantization (``q(clip(v, lo, hi)) == clip(q(v), q(lo), q(hi))``, rounding being monotone), so
  the activation moves behind the QuantizeLinear as an integer Clip, or vanishes when the integer
  type already saturates there: :func:`integer_activations`.
* Ops that only move values (MaxPool, Flatten, Reshape, ...) have no quantizer after them; their output
  lies on their input's grid, so re-quantizing it with that grid is the identity and gives the next
  weighted layer its DequantizeLinear input: :func:`requantize_value_preserving_ops`.
* Integer kernels take the bias as int32 on the scale ``s_input * s_weight``: :func:`quantize_biases`,
  rounded as the simulated model rounds it (``core.integer_accumulation``).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnx

from hwquant.core.numerics import quant_math
from hwquant.core.numerics.integer_accumulation import accumulator_bias
from hwquant.exporter.onnx_graph import GraphEditor, attrs_of

VALUE_PRESERVING_OPS = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity",
                        "Slice", "Gather", "Dropout"}


def _per_tensor_qparams(ed: GraphEditor, node: Optional[onnx.NodeProto]) -> Optional[Tuple[float, np.ndarray]]:
    """(scale, zero point array) of a per-tensor QuantizeLinear / DequantizeLinear with constants."""
    if node is None or node.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(node.input) < 3:
        return None
    scale, zp = ed.constant(node.input[1]), ed.constant(node.input[2])
    if scale is None or zp is None or scale.size != 1:
        return None
    return float(scale.reshape(())), zp


def _bound_index(value: float, scale: float, zp: np.ndarray) -> Optional[float]:
    """The integer of an activation bound on the grid (or +-inf past the type's range); None when the
    bound falls between grid points (then the activation does not commute with quantization)."""
    info = np.iinfo(zp.dtype)
    if not np.isfinite(value):
        return value
    k = quant_math.integers_on_grid(np.float32(value), np.float32(scale))
    q = k + float(zp)
    if q <= info.min:
        return -np.inf
    if q >= info.max:
        return np.inf
    return q if np.float32(k * np.float32(scale)) == np.float32(value) else None


def _activation_bounds(ed: GraphEditor, node: onnx.NodeProto) -> Optional[Tuple[float, float]]:
    if node.op_type == "Relu":
        return 0.0, np.inf
    if node.op_type != "Clip":
        return None
    attrs = attrs_of(node)
    lo, hi = attrs.get("min", -np.inf), attrs.get("max", np.inf)  # opset < 11 keeps them as attributes
    for k, _default in ((1, -np.inf), (2, np.inf)):
        if len(node.input) > k and node.input[k]:
            v = ed.constant(node.input[k])
            if v is None:
                return None
            lo, hi = (float(v), hi) if k == 1 else (lo, float(v))
    return float(lo), float(hi)


def integer_activations(model: onnx.ModelProto) -> int:
    """``X -> Relu/Clip -> Q`` becomes ``X -> Q -> Clip(int)`` (or ``X -> Q``); returns how many."""
    ed, done = GraphEditor(model), 0
    for q in [n for n in ed.nodes if n.op_type == "QuantizeLinear"]:
        act = ed.producer(q.input[0])
        qparams = _per_tensor_qparams(ed, q)
        if act is None or qparams is None or len(ed.consumers(act.output[0])) != 1:
            continue
        bounds = _activation_bounds(ed, act)
        source = act.input[0]
        if bounds is None or ed.is_graph_output(source) or len(ed.consumers(source)) != 1:
            continue
        scale, zp = qparams
        if zp.dtype.itemsize != 1:  # ONNX Runtime's Clip has 8-bit integer kernels only
            continue
        qlo, qhi = (_bound_index(b, scale, zp) for b in bounds)
        if qlo is None or qhi is None:
            continue
        q.input[0] = source
        ed.replace(act, [])
        if np.isfinite(qlo) or np.isfinite(qhi):
            info = np.iinfo(zp.dtype)
            lo = ed.add_initializer(np.asarray(max(qlo, info.min), zp.dtype), f"{q.output[0]}_lo")
            hi = ed.add_initializer(np.asarray(min(qhi, info.max), zp.dtype), f"{q.output[0]}_hi")
            clipped = ed.fresh(f"{q.output[0]}_activation")
            ed.rename_input(q.output[0], clipped, ed.consumers(q.output[0]))
            ed.insert_after(q, [ed.node("Clip", [q.output[0], lo, hi], [clipped])])
        done += 1
    ed.commit()
    return done


def requantize_value_preserving_ops(model: onnx.ModelProto) -> int:
    """Add ``Q -> DQ`` (the input's grid) after value-moving ops fed by a DequantizeLinear."""
    ed, done = GraphEditor(model), 0
    for node in [n for n in ed.nodes if n.op_type in VALUE_PRESERVING_OPS]:
        dq = ed.producer(node.input[0])
        if dq is None or dq.op_type != "DequantizeLinear" or _per_tensor_qparams(ed, dq) is None:
            continue
        out = node.output[0]
        users = ed.consumers(out)
        if not users or ed.is_graph_output(out) or all(u.op_type == "QuantizeLinear" for u in users):
            continue
        q_out, dq_out = ed.fresh(f"{out}_requantized"), ed.fresh(f"{out}_dequantized")
        ed.rename_input(out, dq_out, users)
        ed.insert_after(node, [ed.node("QuantizeLinear", [out, dq.input[1], dq.input[2]], [q_out]),
                               ed.node("DequantizeLinear", [q_out, dq.input[1], dq.input[2]], [dq_out])])
        done += 1
    ed.commit()
    return done


def quantize_biases(model: onnx.ModelProto) -> int:
    """Float biases of Conv / Gemm with quantized input and integer weights become int32 on the scale
    ``s_input * s_weight``, the form integer kernels accumulate in."""
    ed, done = GraphEditor(model), 0
    for node in [n for n in ed.nodes if n.op_type in ("Conv", "Gemm") and len(n.input) > 2 and n.input[2]]:
        x_q = _per_tensor_qparams(ed, ed.producer(node.input[0]))
        w_dq, bias = ed.producer(node.input[1]), ed.initializer(node.input[2])
        if x_q is None or bias is None or w_dq is None or w_dq.op_type != "DequantizeLinear":
            continue
        w_scale = ed.constant(w_dq.input[1])
        if ed.initializer(w_dq.input[0]) is None or w_scale is None:
            continue
        on_grid = accumulator_bias(onnx.numpy_helper.to_array(bias), x_q[0], w_scale)
        if on_grid is None:
            continue
        qb, b_scale = on_grid
        dq_out = ed.fresh(f"{node.input[2]}_dequantized")
        inputs = [ed.add_initializer(qb.astype(np.int32), f"{node.input[2]}_quantized"),
                  ed.add_initializer(b_scale, f"{node.input[2]}_scale"),
                  ed.add_initializer(np.zeros(qb.shape, np.int32), f"{node.input[2]}_zero_point")]
        ed.insert_after(w_dq, [ed.node("DequantizeLinear", inputs, [dq_out], axis=0)])
        node.input[2] = dq_out
        done += 1
    ed.commit()
    return done


def optimize_for_integer_kernels(model: onnx.ModelProto) -> dict:
    """All three rewrites, in the order that lets each feed the next; returns their counts."""
    return {"integer_activations": integer_activations(model),
            "requantized_value_preserving_ops": requantize_value_preserving_ops(model),
            "quantized_biases": quantize_biases(model)}
