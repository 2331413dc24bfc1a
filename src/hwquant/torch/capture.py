"""Capture a PyTorch model into the framework-free core graph.

torch.fx symbolic tracing first (it keeps layers as layers); when it cannot trace the model (Python
control flow on tensor values or shapes, unsupported constructs), torch.export is tried, which
specialises shape-dependent control flow on the example inputs (see `export_capture.py`). A model
neither can capture gets a `CaptureError` naming the module and the construct, and what to do.
"""
from __future__ import annotations

import copy
import inspect
import traceback
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp

from hwquant.core.graph import Graph, InputRef, Node, NodeKind
from hwquant.torch.functional_layers import functional_calls_to_layers
from hwquant.errors import HwquantError


class CaptureError(HwquantError, RuntimeError):
    """The model could not be captured into a graph."""


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
    if isinstance(args, fx.Node):
        name = names[args]
        if name not in inputs:
            inputs.append(name)
        return InputRef(inputs.index(name))
    if isinstance(args, (list, tuple)):
        return type(args)(_convert_args(a, inputs, names) for a in args)
    if isinstance(args, dict):
        return {k: _convert_args(v, inputs, names) for k, v in args.items()}
    if isinstance(args, slice):
        return slice(*(_convert_args(x, inputs, names) for x in (args.start, args.stop, args.step)))
    return args


def _plain_kwargs(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in kwargs.items() if not isinstance(v, (fx.Node, torch.Tensor))}


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
            value = _fetch_attr(gm, n.target)
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
                                  module_weights(module), module, args, kwargs, shape, str(n.target)))
            elif n.op == "call_function":
                nodes.append(Node(n.name, NodeKind.FUNCTION, n.target, inputs, _plain_kwargs(n.kwargs), {}, n.target,
                                  args, kwargs, shape, _scope(n)))
            else:
                method_type = getattr(torch.Tensor, n.target, n.target)
                nodes.append(Node(n.name, NodeKind.METHOD, method_type, inputs, _plain_kwargs(n.kwargs), {}, n.target,
                                  args, kwargs, shape, _scope(n)))
        elif n.op == "output":
            outputs = _output_structure(n.args[0], names)
        if n.op != "output":
            dtype = getattr(n.meta.get("tensor_meta"), "dtype", None)
            nodes[-1].float_output = dtype is None or dtype.is_floating_point or dtype.is_complex
    return Graph(nodes, outputs, name=name)


def _scope(n: fx.Node) -> str:
    stack = n.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1]
        return path[0] if isinstance(path, tuple) else str(path)
    return ""


def _output_structure(arg: Any, names: Dict[fx.Node, str]) -> Any:
    if isinstance(arg, fx.Node):
        return names[arg]
    if isinstance(arg, (list, tuple)):
        return type(arg)(_output_structure(a, names) for a in arg)
    if isinstance(arg, dict):
        return {k: _output_structure(v, names) for k, v in arg.items()}
    raise CaptureError(f"the model returns a {type(arg).__name__} that is not computed from its inputs; "
                       "return only tensors (or tuples / lists / dicts of tensors)")


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _failure_site(exc: BaseException) -> Tuple[str, str]:
    """(module class and name, source line) of the innermost user-module frame of a trace failure."""
    site, line = "the model", ""
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        self_obj = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None  # the method's `self`
        if isinstance(self_obj, torch.nn.Module) and "torch/fx" not in frame.f_code.co_filename \
                and "torch/nn/modules" not in frame.f_code.co_filename:
            site = f"{type(self_obj).__name__}.{frame.f_code.co_name}"
            try:
                line = inspect.getframeinfo(frame, context=1).code_context[0].strip()
            except Exception:  # noqa: BLE001 - best effort for the message only
                line = ""
            line = f"{frame.f_code.co_filename}:{lineno}: {line}"
    return site, line


def _defaulted_arguments(model: torch.nn.Module, n_given: int) -> Dict[str, Any]:
    """forward's parameters beyond the `n_given` positional inputs, at their defaults (traced as
    constants); a parameter with no default that the data cannot fill is refused by name."""
    concrete: Dict[str, Any] = {}
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for i, p in enumerate(params):
        positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        if positional and i < n_given:
            continue
        if p.default is inspect.Parameter.empty:
            raise CaptureError(
                f"{type(model).__name__}.forward takes {'keyword-only ' if not positional else ''}argument "
                f"'{p.name}' with no default, which representative batches (one tensor per positional input) "
                f"cannot give: give it a default, or wrap the model in a module whose forward takes only tensors")
        concrete[p.name] = p.default
    return concrete


def _drop_specialised_inputs(gm: fx.GraphModule, n_given: int) -> None:
    """Remove the placeholders fx keeps for arguments traced at their defaults, with the checks it
    adds on them (the graph's inputs are then exactly the representative batch's tensors)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for p in placeholders[n_given:]:
        doomed, todo = {p}, [p]
        while todo:
            for user in todo.pop().users:
                if user not in doomed:
                    doomed.add(user)
                    todo.append(user)
        if any(d.op == "output" for d in doomed):
            continue
        for node in reversed([n for n in gm.graph.nodes if n in doomed]):
            gm.graph.erase_node(node)
    gm.recompile()


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


def _run_failure_hint(example_inputs: Sequence[Any]) -> str:
    for k, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex()):
            return (f"\nInput {k} is {x.dtype}: if it is an image, a signal or features, give float32 tensors "
                    "(e.g. x.float() / 255); integer inputs are for token ids and indices")
    return ""


def capture(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> Graph:
    """The core graph of `model` (not modified: a copy is traced), with shapes from `example_inputs`."""
    model = copy.deepcopy(model).eval()
    name = type(model).__name__
    concrete = _defaulted_arguments(model, len(example_inputs))
    try:
        gm = fx.symbolic_trace(model, concrete_args=concrete or None)
        if concrete:
            _drop_specialised_inputs(gm, len(example_inputs))
    except Exception as fx_error:  # noqa: BLE001 - any tracing failure leads to the fallback
        from hwquant.torch.export_capture import capture_with_export
        site, line = _failure_site(fx_error)
        try:
            return capture_with_export(model, example_inputs, name)
        except Exception as export_error:  # noqa: BLE001
            raise CaptureError(
                f"cannot capture {name}: torch.fx failed in {site} ({type(fx_error).__name__}: "
                f"{str(fx_error).splitlines()[0] if str(fx_error) else ''})"
                + (f"\n  at {line}" if line else "")
                + f"\n  and torch.export failed too: {type(export_error).__name__}: "
                  f"{str(export_error).splitlines()[0] if str(export_error) else ''}"
                + "\nWhat to do: replace Python control flow on tensor values (if/for/while on a tensor) with "
                  "tensor operations (torch.where, masking), or move it outside the model's forward; "
                  "shape-dependent control flow is fine for torch.export.") from export_error
    functional_calls_to_layers(gm)
    functionalize_in_place_ops(gm)
    try:
        with torch.no_grad():  # shapes from a couple of samples: the traced graph does not depend on the batch size
            ShapeProp(gm).propagate(*[x[:2] if isinstance(x, torch.Tensor) and x.dim() > 0 else x
                                      for x in example_inputs])
    except Exception as e:  # noqa: BLE001
        cause = e.__cause__ or e  # ShapeProp wraps the model's own error in a long node dump
        raise CaptureError(f"{name} failed to run on the representative inputs (shapes "
                           f"{[tuple(x.shape) for x in example_inputs]}, dtypes "
                           f"{[str(x.dtype).removeprefix('torch.') for x in example_inputs]}): "
                           f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
                           + _run_failure_hint(example_inputs)) from e
    return graph_from_fx(gm, name)
