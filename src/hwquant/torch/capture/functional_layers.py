"""Models written with torch.nn.functional only: ``F.conv2d(x, self.weight, self.bias, ...)`` or
``F.linear(x, self.weight)`` on the model's own parameters become the layer they compute
(``nn.Conv1d/2d/3d``, ``nn.Linear``), so their kernels are quantized as the TPC says for that layer,
like any layer's. A call whose weight is computed (not a parameter or buffer of the model) keeps its
float weights: it is a product of two activations, quantized through its inputs.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import fx, nn

from hwquant.torch.capture.fx_graph import attr_value, call_arguments, fresh_name, frozen_layer, replace_nodes

# function -> (layer class, its ATen form); argument order (input, weight, bias, stride, padding,
# dilation, groups) for convolutions, (input, weight, bias) for linear.
_CONVS = {F.conv1d: nn.Conv1d, F.conv2d: nn.Conv2d, F.conv3d: nn.Conv3d,
          torch.ops.aten.conv1d.default: nn.Conv1d, torch.ops.aten.conv2d.default: nn.Conv2d,
          torch.ops.aten.conv3d.default: nn.Conv3d}
_LINEARS = (F.linear, torch.ops.aten.linear.default)
_CONV_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


def _parameter(gm: fx.GraphModule, node: Any) -> Optional[torch.Tensor]:
    obj = attr_value(gm, node)
    return obj if isinstance(obj, torch.Tensor) else None


def _layer(gm: fx.GraphModule, node: fx.Node) -> Optional[nn.Module]:
    """The layer equivalent to a functional convolution / linear call on the model's own tensors."""
    is_conv = node.target in _CONVS
    args = call_arguments(node, _CONV_ARGS if is_conv else _CONV_ARGS[:3])
    weight = _parameter(gm, args.get("weight"))
    bias_node = args.get("bias")
    bias = _parameter(gm, bias_node)
    if weight is None or (bias_node is not None and bias is None):
        return None
    if is_conv:
        cls = _CONVS[node.target]
        dims = weight.dim() - 2
        groups = int(args.get("groups", 1))
        padding = args.get("padding", 0)
        tup = lambda v: tuple(v) if isinstance(v, (list, tuple)) else v  # noqa: E731 - ATen passes lists
        layer = cls(weight.shape[1] * groups, weight.shape[0], tuple(weight.shape[2:]), stride=tup(args.get("stride", 1)),
                    padding=tup(padding), dilation=tup(args.get("dilation", 1)), groups=groups, bias=bias is not None,
                    device="meta")
        if dims != len(layer.kernel_size):
            return None
    else:
        layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    return frozen_layer(layer, weight, bias).to(weight.device)


def functional_calls_to_layers(gm: fx.GraphModule) -> int:
    """Rewrite `gm` (a traced copy) in place; returns the number of calls turned into layers."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not (node.target in _CONVS or node.target in _LINEARS):
            continue
        layer = _layer(gm, node)
        if layer is None:
            continue
        # named after the module that owns the weight ("block.weight" -> "block_functional")
        owner = str(call_arguments(node, _CONV_ARGS)["weight"].target).rpartition(".")[0].replace(".", "_")
        name = fresh_name(gm, f"{owner or node.name}_functional")
        gm.add_submodule(name, layer)
        replace_nodes(gm, node, [node], "call_module", name, (node.args[0] if node.args else node.kwargs["input"],))
        count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return count
