"""The forms the IMX500 converter accepts, written into the copy of a quantized model that MCTQ
export traces. Each rewrite computes exactly the same function; only the tensor layout of the
operations changes, to the one the chip runs:

- a fully connected layer takes a 2-D (N, D) or 4-D (N, D0, D1, D2) input: a linear layer applied to
  token sequences (N, T, D) runs on (N, 1, T, D), other ranks on (N, 1, -1, D);
- a product of two activations (attention scores, attention-weighted values) is a 3-D batched
  matrix product (N, D0, D1) whose output is quantized: a 4-D product (N, heads, T, d) runs head by
  head, each head's product passes through the product's activation quantizer, and the heads are
  stacked back (quantizing per head and then stacking is the same as quantizing the stack).

(GELU is the third form: the converter takes ONNX's Gelu operator, which exists from opset 20; the
exporter picks that opset, see ``exporter.imx500``.)
"""
from __future__ import annotations

import copy
import operator
from typing import Dict, List, Sequence, Tuple

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from hwquant.torch.capture.fx_graph import replace_nodes
from hwquant.torch.quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper

_MATMULS = (operator.matmul, torch.matmul, torch.ops.aten.matmul.default)  # fx capture, torch.export capture


class _LinearOn4D(nn.Module):
    """Runs a wrapped linear layer on a 2-D or 4-D view of its input."""

    def __init__(self, wrapper: nn.Module):
        super().__init__()
        self.wrapper = wrapper

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() in (1, 2, 4):
            return self.wrapper(x)
        if x.dim() == 3:
            return self.wrapper(x.unsqueeze(1)).squeeze(1)
        y = self.wrapper(x.reshape(x.shape[0], 1, -1, x.shape[-1]))
        return y.reshape(*x.shape[:-1], y.shape[-1])


class _MatmulHeadByHead(nn.Module):
    """holder(a @ b) for 4-D a and b, as one quantized 3-D product per head. Each head has its own
    copy of the holder: the ONNX tracer refuses one quantizer marker applied twice."""

    def __init__(self, holder: nn.Module, heads: int):
        super().__init__()
        self.holders = nn.ModuleList(copy.deepcopy(holder) for _ in range(heads))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.stack([q(torch.matmul(a[:, h], b[:, h])) for h, q in enumerate(self.holders)], dim=1)


def rewrite_for_imx500(model: nn.Module, example: Sequence[torch.Tensor]) -> int:
    """Rewrite `model` (an export copy; changed in place) into the converter's forms, with the
    tensor ranks of a run on `example`; returns the number of rewritten operations."""
    count = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, PytorchQuantizationWrapper) and isinstance(module.layer, nn.Linear):
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, _LinearOn4D(module))
            count += 1
    for graph_module, inputs in _graph_modules_and_inputs(model, example):
        count += _matmuls_head_by_head(graph_module, inputs)
    return count


def _graph_modules_and_inputs(model: nn.Module, example: Sequence[torch.Tensor]) -> List[Tuple[fx.GraphModule, tuple]]:
    """Every captured graph inside `model` (the model itself, or the quantized model a caller's wrapper
    holds, such as Ultralytics' NMS layer) with the inputs it gets when `model` runs on `example`."""
    graphs = [m for m in model.modules() if isinstance(m, fx.GraphModule)]
    seen: Dict[int, tuple] = {}
    hooks = [g.register_forward_pre_hook(lambda module, args: seen.setdefault(id(module), args)) for g in graphs]
    try:
        with torch.no_grad():
            model(*example)
    finally:
        for hook in hooks:
            hook.remove()
    return [(g, seen[id(g)]) for g in graphs if id(g) in seen]


def _heads(node: fx.Node) -> int:
    """The number of heads of a product of two 4-D tensors with the same dimension 1 (else 0)."""
    shapes = [getattr(a.meta.get("tensor_meta"), "shape", None) if isinstance(a, fx.Node) else None for a in node.args]
    if len(shapes) == 2 and all(s is not None and len(s) == 4 for s in shapes) and shapes[0][1] == shapes[1][1]:
        return int(shapes[0][1])
    return 0


def _matmuls_head_by_head(model: fx.GraphModule, example: Sequence[torch.Tensor]) -> int:
    """Each 4-D product of two tensors whose only reader is its activation holder becomes one
    `_MatmulHeadByHead` call in place of the two."""
    with torch.no_grad():
        ShapeProp(model).propagate(*example)
    count = 0
    for node in list(model.graph.nodes):
        is_matmul = ((node.op == "call_function" and node.target in _MATMULS)
                     or (node.op == "call_method" and node.target == "matmul"))
        users = list(node.users)
        if not (is_matmul and not node.kwargs and len(users) == 1 and users[0].op == "call_module"
                and isinstance(model.get_submodule(users[0].target), PytorchActivationQuantizationHolder)):
            continue
        heads = _heads(node)
        if not heads:
            continue
        holder_node = users[0]
        name = f"{holder_node.target.replace('.', '_')}_head_by_head"
        model.add_submodule(name, _MatmulHeadByHead(model.get_submodule(holder_node.target), heads))
        replace_nodes(model, holder_node, [node, holder_node], "call_module", name, tuple(node.args))
        count += 1
    model.recompile()
    return count
