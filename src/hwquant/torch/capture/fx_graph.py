"""A traced torch.fx GraphModule as the framework-free core graph: its nodes, their layers' framework
attributes and weights (numpy), output shapes. Shared by both capture paths (torch.fx in `capture.py`,
torch.export in `export_route.py`)."""
from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.fx as fx

from hwquant.core.graph.model_graph import Graph, InputRef, Node, NodeKind, map_nested
from hwquant.torch.deployment.custom_layers import is_custom_layer
from hwquant.errors import HwquantError


class CaptureError(HwquantError, RuntimeError):
    """The model could not be captured into a graph."""


def source_line(frame: Any) -> str:
    """The code of a frame's current line, for an error message ("" where it cannot be read)."""
    try:
        return inspect.getframeinfo(frame, context=1).code_context[0].strip()
    except Exception:  # noqa: BLE001 - best effort for the message only
        return ""


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().copy()


def module_framework_attr(module: torch.nn.Module) -> Dict[str, Any]:
    """A layer's constructor arguments as stored on it (what layer filters match against)."""
    try:
        params = inspect.signature(type(module).__init__).parameters
    except (TypeError, ValueError):
        return {}
    attrs = {k: v for k, v in vars(module).items() if k in params and not k.startswith("_")}
    if "bias" in params:
        attrs["bias"] = getattr(module, "bias", None) is not None
    return attrs


def module_weights(module: torch.nn.Module) -> Dict[str, np.ndarray]:
    """The layer's own parameters and buffers (not its children's), as numpy."""
    out: Dict[str, np.ndarray] = {}
    for name, p in module.named_parameters(recurse=False):
        out[name] = to_numpy(p)
    for name, b in module.named_buffers(recurse=False):
        if b is not None and b.is_floating_point():
            out[name] = to_numpy(b)
    return out


def _shape_of(meta: Any) -> Any:
    if meta is None:
        return None
    if hasattr(meta, "shape"):
        return tuple(int(d) for d in meta.shape)
    if isinstance(meta, (list, tuple)):
        return [_shape_of(m) for m in meta]
    return None


def _convert_args(args: Any, inputs: List[str], names: Dict[fx.Node, str]) -> Any:
    """fx arguments with fx.Node references replaced by InputRef (recording the input order)."""
    def ref(arg: Any) -> Any:
        if not isinstance(arg, fx.Node):
            return arg
        if names[arg] not in inputs:
            inputs.append(names[arg])
        return InputRef(inputs.index(names[arg]))
    return map_nested(args, ref)


def graph_from_fx(gm: fx.GraphModule, name: str) -> Graph:
    """The core graph of a traced GraphModule whose nodes carry shape metadata."""
    nodes: List[Node] = []
    names: Dict[fx.Node, str] = {}
    outputs: Any = None
    for n in gm.graph.nodes:
        names[n] = n.name
        shape = _shape_of(n.meta.get("tensor_meta"))
        if n.op == "placeholder":
            nodes.append(Node(n.name, NodeKind.INPUT, "input", output_shape=shape))
        elif n.op == "get_attr":
            value = attr_value(gm, n)
            if not isinstance(value, torch.Tensor):
                raise CaptureError(f"attribute '{n.target}' used in the model is a {type(value).__name__}, not a tensor")
            nodes.append(Node(n.name, NodeKind.CONSTANT, "constant", weights={0: to_numpy(value)}, call_target=value,
                              output_shape=tuple(value.shape), module_path=str(n.target)))
        elif n.op in ("call_module", "call_function", "call_method"):
            inputs: List[str] = []
            args = _convert_args(n.args, inputs, names)
            kwargs = _convert_args(dict(n.kwargs), inputs, names)
            if n.op == "call_module":
                module = gm.get_submodule(n.target)
                nodes.append(Node(n.name, NodeKind.MODULE, type(module), inputs, module_framework_attr(module),
                                  module_weights(module), module, args, kwargs, shape, str(n.target),
                                  opaque=is_custom_layer(module)))
            else:
                is_function = n.op == "call_function"
                layer_type = n.target if is_function else getattr(torch.Tensor, n.target, n.target)
                attrs = {k: v for k, v in n.kwargs.items() if not isinstance(v, (fx.Node, torch.Tensor))}
                path = list(n.meta.get("nn_module_stack") or {"": ""}.values())[-1]  # the innermost module's
                scope = path[0] if isinstance(path, tuple) else str(path)
                nodes.append(Node(n.name, NodeKind.FUNCTION if is_function else NodeKind.METHOD, layer_type, inputs,
                                  attrs, {}, n.target, args, kwargs, shape, scope))
        elif n.op == "output":
            outputs = map_nested(n.args[0], lambda a: _output_name(a, names))
        if n.op != "output":
            dtype = getattr(n.meta.get("tensor_meta"), "dtype", None)
            nodes[-1].float_output = dtype is None or dtype.is_floating_point or dtype.is_complex
    return Graph(nodes, outputs, name=name)


def _output_name(arg: Any, names: Dict[fx.Node, str]) -> str:
    if isinstance(arg, fx.Node):
        return names[arg]
    raise CaptureError(f"the model returns a {type(arg).__name__} that is not computed from its inputs; "
                       "return only tensors (or tuples / lists / dicts of tensors)")


def attr_value(gm: torch.nn.Module, node: Any) -> Any:
    """What a `get_attr` node reads ("block.weight"); None when `node` is not a `get_attr` node."""
    if not (isinstance(node, fx.Node) and node.op == "get_attr"):
        return None
    obj: Any = gm
    for part in str(node.target).split("."):
        obj = getattr(obj, part)
    return obj


def call_arguments(node: fx.Node, names: Sequence[str]) -> Dict[str, Any]:
    """A call's arguments by name: the positional ones named by `names`, then its keywords."""
    values = dict(zip(names, node.args))
    values.update(node.kwargs)
    return values


def frozen_layer(layer: torch.nn.Module, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.nn.Module:
    """`layer` given copies of `weight` and `bias` as frozen parameters, in eval mode. Make it on the meta
    device: a random initialisation would draw from torch's process-wide generator, changing the random
    numbers of the caller and of every other thread."""
    layer.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
    if bias is not None:
        layer.bias = torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
    return layer.eval()


def fresh_name(gm: fx.GraphModule, base: str) -> str:
    """`base`, or `base_1`, `base_2`, ...: the first that is not an attribute of `gm` yet."""
    name, i = base, 0
    while hasattr(gm, name):
        i += 1
        name = f"{base}_{i}"
    return name


def replace_nodes(gm: fx.GraphModule, last: fx.Node, chain: Sequence[fx.Node], op: str, target: Any,
                  args: tuple) -> fx.Node:
    """Insert a call after `last` that its readers read instead (with its metadata), and erase `chain`
    (which holds `last`); returns the new node."""
    with gm.graph.inserting_after(last):
        new = gm.graph.create_node(op, target, args, {})
    new.meta = dict(last.meta)
    last.replace_all_uses_with(new)
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in sorted(chain, key=lambda n: -position[n]):  # readers first
        gm.graph.erase_node(node)
    return new


def _in_place_target(gm: fx.GraphModule, n: fx.Node) -> bool:
    if n.op == "call_module":
        return getattr(gm.get_submodule(n.target), "inplace", False) is True
    if n.op == "call_function":
        return n.kwargs.get("inplace") is True
    return (n.op == "call_method" and n.target.endswith("_") and not n.target.startswith("_")
            and hasattr(torch.Tensor, n.target[:-1]))


def functionalize_in_place_ops(gm: fx.GraphModule) -> int:
    """Make in-place operations out of place, and let every later reader of the tensor they mutated
    read their result instead: the graph then computes the model's function without aliasing, so a
    model observed tensor by tensor (statistics, corrections) or with a quantizer after an output
    computes what the model computes. (VGG-style models save a tensor for a skip connection that a
    later ReLU(inplace=True) overwrites: the skip connection carries the ReLU's output.)"""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    count = 0
    for n in list(gm.graph.nodes):
        if not _in_place_target(gm, n) or not n.args or not isinstance(n.args[0], fx.Node):
            continue
        source = n.args[0]
        for user in list(source.users):
            if user is not n and order[user] > order[n]:
                user.replace_input_with(source, n)
        if n.op == "call_module":
            gm.get_submodule(n.target).inplace = False
        elif n.op == "call_function":
            n.kwargs = {**n.kwargs, "inplace": False}
        else:
            n.target = n.target[:-1]
        count += 1
    if count:
        gm.recompile()
    return count
