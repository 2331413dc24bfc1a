"""Integer kernels, simulated exactly: a quantized convolution or fully connected layer whose input
lies on a known grid computes like the integer kernel a deployment runs (ONNX Runtime's
QLinearConv / QGemm, the accelerators' MAC arrays):

    acc = sum((q_x - zp_x) * (q_w - zp_w)) + round(bias / (s_x * s_w))      exact integers
    out = float32(acc) * float32(s_x * s_w)                                    one rounding

The next activation quantizer then rounds ``out / s_y``, which for power-of-two activation scales is
bitwise the integer kernel's requantization ``round(float32(acc) * float32(s_x * s_w / s_y))``.
A float simulation instead sums float products in some order; its tiny differences flip values that
sit on a rounding boundary, and over a deep network those flips spread until the exported model and
the simulation disagree on many outputs. This module holds the framework-free parts: which grid a
layer's input lies on, and the bias on the accumulator's grid (shared with the ONNX exporter, so
both round it alike).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from hwquant.core.numerics import quant_math
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.tpc.enums import OperatorSetNames as Ops

# Operator sets whose output values are some of their input's values (moved, not computed), so the
# output lies on the input's grid: the grid carries through them.
VALUE_MOVING_OPSETS = {Ops.FLATTEN.value, Ops.RESHAPE.value, Ops.UNSQUEEZE.value, Ops.SQUEEZE.value,
                       Ops.PERMUTE.value, Ops.TRANSPOSE.value, Ops.DROPOUT.value, Ops.MAXPOOL.value,
                       Ops.GET_ITEM.value, Ops.STRIDED_SLICE.value, Ops.GATHER.value, Ops.SPLIT_CHUNK.value}
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def input_grid_source(graph: Graph, node: Node, moves_values: Callable[[Node], bool]) -> Optional[Node]:
    """The node whose activation quantizer sets the grid of the node's first input, or None.

    Walks back through quantization-preserving nodes and nodes that only move values
    (``moves_values``, and the operator sets in VALUE_MOVING_OPSETS) to the activation quantizer."""
    seen = 0
    while node.inputs and seen < len(graph):
        producer = graph.node(node.inputs[0])
        cfg = producer.final_config
        act = cfg.activation_quantization_cfg if cfg is not None else None
        if act is not None and act.quantized:
            return producer
        if not ((act is not None and act.quantization_preserving) or producer.opset in VALUE_MOVING_OPSETS
                or moves_values(producer)):
            return None
        node, seen = producer, seen + 1
    return None


def input_grid(graph: Graph, node: Node, moves_values: Callable[[Node], bool]) -> Optional[quant_math.AffineGrid]:
    """The per-tensor affine grid the node's first input lies on, or None if it is not on one."""
    source = input_grid_source(graph, node, moves_values)
    if source is None:
        return None
    act = source.final_config.activation_quantization_cfg
    grid = quant_math.make_grid(act.activation_quantization_method, act.activation_n_bits,
                                act.activation_quantization_params)
    return grid if isinstance(grid, quant_math.AffineGrid) and grid.axis is None else None


def accumulator_bias(bias, input_scale, weight_scale):
    """(integer bias, its scale ``float32(s_x * s_w)``), or None when the integers overflow int32.

    In the arrays' own library (numpy, torch...); the integers come back as float64 values, exact."""
    namespace = quant_math.namespace_of(bias)
    as32 = [namespace.astype(namespace.param(v, bias), "float32") for v in (input_scale, weight_scale)]
    scale = namespace.broadcast_to(as32[0] * as32[1], tuple(bias.shape))
    q = quant_math.integers_on_grid(namespace.astype(bias, "float64"), namespace.astype(scale, "float64"))
    values = quant_math._to_numpy(q)
    ok = bool(np.isfinite(values).all()) and values.size > 0 and values.min() >= INT32_MIN and values.max() <= INT32_MAX
    return (q, scale) if ok else None
