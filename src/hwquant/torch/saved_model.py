"""Save and load a quantized PyTorch model as plain data, so that loading runs no arbitrary pickle.

File format: ``torch.save`` of one dict holding only str, int, float, bool, None, lists, dicts and
tensors, so it opens with ``torch.load(path, weights_only=True)``::

    {"format": "hwquant.quantized_model", "version": 1, "class_name": str,
     "metadata": value,                       # the model's hwquant_metadata
     "modules": spec,                         # the module tree, from the root
     "graph": [{"op", "name", "target", "args", "kwargs"}, ...],   # the torch.fx nodes in order
     "tensors": {"path.to.param": tensor}}    # every parameter and buffer (non-persistent ones too)

A module spec is ``{"kind", "parameters", "buffers", "children"}`` plus, by kind: ``quantizer`` (the
InferableQuantizer constructor arguments), ``holder`` / ``wrapper`` (rebuilt from their children),
``torch`` (``"class"``: a qualified name under torch.nn, and ``"attrs"``: its plain attributes) or
``root``. Values that JSON lacks (tuples, dicts with any keys, graph node references, slices,
Ellipsis, dtypes, devices, memory formats, layouts, torch.Size) are dicts tagged by ``"$"``.

Safety argument: with ``weights_only=True`` torch.load builds nothing but those plain types and
tensors. Everything executable is then named by a string and resolved, by walking attributes (nothing
is imported), only inside an allowlist: module classes defined in ``torch.nn.*`` (made with
``__new__``, so no constructor runs), the three hwquant quantizer classes (their constructors take the
recorded plain values), and functions in torch, torch.nn.functional, torch.special/linalg/fft,
torch.Tensor, torch.ops.aten, operator, math and the builtins getattr/len/int/float/slice. Private
names, objects re-exported from outside torch (``torch.os``), and names that read or write files,
compile code, return modules or call a callable they are handed (``_DENIED``) are refused; ``getattr``
takes only a literal public torch.Tensor attribute name, so no chain of attribute reads leaves the
tensor world. Names fx writes verbatim into the generated code (node, input and keyword names) must
be identifiers, and module paths word characters.
"""
from __future__ import annotations

import functools
import io
import keyword
import math
import operator
import re
import types
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import fx, nn

from hwquant.errors import HwquantError
from hwquant.fileio import atomic_write
from hwquant.torch.metadata import attach_metadata, read_metadata
from hwquant.torch.quantizers import InferableQuantizer, PytorchActivationQuantizationHolder, PytorchQuantizationWrapper

FORMAT = "hwquant.quantized_model"
VERSION = 1


class SavedModelError(HwquantError, ValueError):
    """A file is not a loadable hwquant quantized model, or names something outside the allowlist."""


_HINT = "export the model to ONNX or TorchScript instead"
_INTERNALS = frozenset(vars(nn.Module()))  # nn.Module's own bookkeeping, rebuilt by nn.Module.__init__
_OPS = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
_NAMESPACES = {"torch.nn.functional": F, "torch.special": torch.special, "torch.linalg": torch.linalg,
               "torch.fft": torch.fft, "torch.Tensor": torch.Tensor, "torch": torch,
               "operator": operator, "_operator": operator, "math": math}
_BUILTINS = {f.__name__: f for f in (getattr, len, int, float, slice)}
# Names that read or write files, compile code, return modules or call a callable they are handed.
_DENIED = frozenset({"load", "save", "from_file", "compile", "get_device_module", "cond", "while_loop", "vmap",
                     "handle_torch_function", "boolean_dispatch", "attrgetter", "methodcaller", "call", "apply_",
                     "map_", "map2_", "register_hook", "register_post_accumulate_grad_hook"})
_TORCH_VALUES = {"dtype": torch.dtype, "memory_format": torch.memory_format, "layout": torch.layout}
_NAME = re.compile(r"[A-Za-z_]\w*\Z")
_PATH = re.compile(r"\w+(\.\w+)*\Z")  # module paths may hold Sequential indices ("body.0")


def _identifier(name: Any, what: str) -> str:
    if not (isinstance(name, str) and _NAME.match(name) and not keyword.iskeyword(name)):
        raise SavedModelError(f"invalid {what} {name!r:.80} in the model record")
    return name


def _resolve_function(name: Any) -> Any:
    """The function recorded as `name`, looked up only inside the allowlist."""
    refuse = SavedModelError(f"function {name!r:.80} is not in the allowlist (torch, torch.nn.functional, "
                             "torch.Tensor methods, torch.ops.aten, operator, math, getattr/len/int/float/slice)")
    if not isinstance(name, str):
        raise refuse
    if name.removeprefix("builtins.") in _BUILTINS:
        return _BUILTINS[name.removeprefix("builtins.")]
    if name.startswith("torch.ops.aten."):
        parts = name.split(".")[3:]
        if not (1 <= len(parts) <= 2 and all(_NAME.match(p) for p in parts) and parts[0] not in _DENIED):
            raise refuse
        obj = torch.ops.aten
        for part in parts:
            obj = getattr(obj, part, None)
        if isinstance(obj, _OPS):
            return obj
        raise refuse
    prefix, _, attr = name.rpartition(".")
    ns = _NAMESPACES.get(prefix)
    public = not attr.startswith("_") or name == "torch._assert"  # fx emits torch._assert for traced asserts
    obj = getattr(ns, attr, None) if ns is not None and _NAME.match(attr) and attr not in _DENIED and public else None
    home = str(getattr(obj, "__module__", None) or "torch")  # refuses re-exports from outside torch (torch.os...)
    if callable(obj) and not isinstance(obj, (type, types.ModuleType)) \
            and (not prefix.startswith("torch") or home.startswith("torch")):
        return obj
    raise refuse


def _function_name(fn: Any) -> str:
    if isinstance(fn, _OPS):
        name = f"torch.ops.{fn}"
    elif any(fn is f for f in _BUILTINS.values()):
        name = f"builtins.{fn.__name__}"
    else:
        short = getattr(fn, "__name__", None)
        name = next((f"{p}.{short}" for p, ns in _NAMESPACES.items() if short and getattr(ns, short, None) is fn), None)
    try:  # record only what the loader will resolve back to the very same function
        if name is not None and _resolve_function(name) is fn:
            return name
    except SavedModelError:
        pass
    raise ValueError(f"the model calls {fn!r}, which is outside the allowlist of loadable functions; {_HINT}")


def _tensor_attr(name: Any) -> bool:
    return isinstance(name, str) and bool(_NAME.match(name)) and not name.startswith("_") \
        and name not in _DENIED and hasattr(torch.Tensor, name)


def _resolve_class(name: Any, strict: bool = True) -> Optional[type]:
    parts = name.split(".") if isinstance(name, str) else []
    obj: Any = None
    if parts[:2] == ["torch", "nn"] and all(_NAME.match(p) and not p.startswith("_") for p in parts):
        obj = torch
        for part in parts[1:]:
            obj = getattr(obj, part, None)
    if isinstance(obj, type) and issubclass(obj, nn.Module) and obj.__module__.startswith("torch.nn.") \
            and _class_name(obj) == name:
        return obj
    if not strict:
        return None
    raise SavedModelError(f"module class {name!r:.80} is not in the allowlist (classes defined in torch.nn "
                          "and hwquant's quantizer modules)")


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _encode(v: Any, where: str) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or type(v) in (bool, int, float, str):
        return v
    if isinstance(v, list):  # fx keeps args in immutable_list / immutable_dict
        return [_encode(x, where) for x in v]
    if type(v) in (tuple, torch.Size):  # tagged, so the loader gives back the same type
        return {"$": "size" if isinstance(v, torch.Size) else "tuple", "items": [_encode(x, where) for x in v]}
    if isinstance(v, dict):
        return {"$": "dict", "items": [[_encode(k, where), _encode(x, where)] for k, x in v.items()]}
    if isinstance(v, fx.Node):
        return {"$": "node", "name": v.name}
    if isinstance(v, slice):
        return {"$": "slice", "items": [_encode(x, where) for x in (v.start, v.stop, v.step)]}
    if v is Ellipsis:
        return {"$": "ellipsis"}
    if isinstance(v, torch.device):
        return {"$": "device", "name": str(v)}
    for tag, kind in _TORCH_VALUES.items():
        if isinstance(v, kind):
            return {"$": tag, "name": str(v).removeprefix("torch.")}
    raise ValueError(f"{where}: value {v!r:.80} of type {type(v).__name__} cannot be saved as plain data; {_HINT}")


def _decode(v: Any, env: Optional[Dict[str, fx.Node]] = None) -> Any:
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) is list:
        return [_decode(x, env) for x in v]
    tag, items = (v.get("$"), v.get("items")) if type(v) is dict else (None, None)
    if tag == "tuple":
        return tuple(_decode(x, env) for x in items)
    if tag == "size":
        return torch.Size(_decode(x) for x in items)
    if tag == "dict":
        return {_decode(k, env): _decode(x, env) for k, x in items}
    if tag == "slice":
        return slice(*(_decode(x, env) for x in items))
    if tag == "ellipsis":
        return Ellipsis
    if tag == "node" and env is not None and v.get("name") in env:
        return env[v["name"]]
    if tag == "device" and isinstance(v.get("name"), str):
        return torch.device(v["name"])
    if tag in _TORCH_VALUES:
        obj = getattr(torch, _identifier(v.get("name"), tag))
        if isinstance(obj, _TORCH_VALUES[tag]):
            return obj
    raise SavedModelError(f"unexpected value {v!r:.80} in the model record")


def _spec(m: nn.Module, path: str, tensors: Dict[str, torch.Tensor], root: bool = False) -> Dict[str, Any]:
    kind = type(m)
    where = f"module '{path[:-1] or '<root>'}' ({kind.__name__})"
    if root:
        spec: Dict[str, Any] = {"kind": "root"}
    elif kind is InferableQuantizer:
        spec = {"kind": "quantizer", "method": int(m.method), "num_bits": int(m.num_bits),
                "params": _encode(m.params, where), "channel_axis": _encode(m.channel_axis, where),
                "target": _encode(m.target, where)}
    elif kind in (PytorchActivationQuantizationHolder, PytorchQuantizationWrapper):
        spec = {"kind": "holder" if kind is PytorchActivationQuantizationHolder else "wrapper"}
    elif kind.__module__.startswith("torch.nn.") and _resolve_class(_class_name(kind), strict=False) is kind:
        attrs = {k: _encode(v, f"{where}, attribute '{k}'") for k, v in vars(m).items() if k not in _INTERNALS}
        spec = {"kind": "torch", "class": _class_name(kind), "attrs": attrs}
    else:
        raise ValueError(f"{where}: class {_class_name(kind)} is outside the allowlist of loadable modules "
                         f"(torch.nn classes and hwquant's quantizer modules); {_HINT}")
    spec["parameters"], spec["buffers"] = {}, {}
    for group, store in (("parameters", m._parameters), ("buffers", m._buffers)):
        for name, t in store.items():
            if t is not None:
                if type(t.detach()) is not torch.Tensor:
                    raise ValueError(f"{where}: '{name}' is a {type(t).__name__}, not a plain tensor; {_HINT}")
                tensors[path + name] = t.detach()
                t = {"requires_grad": t.requires_grad} if group == "parameters" else \
                    {"persistent": name not in m._non_persistent_buffers_set}
            spec[group][name] = t
    spec["children"] = [[n, None if c is None else _spec(c, f"{path}{n}.", tensors)] for n, c in m._modules.items()]
    return spec


def _build(spec: Dict[str, Any], path: str, tensors: Dict[str, Any]) -> nn.Module:
    children = {n: None if s is None else _build(s, f"{path}{n}.", tensors) for n, s in spec["children"]}
    kind = spec["kind"]
    if kind == "quantizer":
        m: nn.Module = InferableQuantizer(spec["method"], spec["num_bits"], _decode(spec["params"]),
                                          _decode(spec["channel_axis"]), _decode(spec["target"]))
    elif kind == "holder":
        m = PytorchActivationQuantizationHolder(children["activation_holder_quantizer"])
    elif kind == "wrapper":
        m = PytorchQuantizationWrapper(children["layer"], dict(children["weights_quantizers"].items()))
    elif kind in ("torch", "root"):
        cls = nn.Module if kind == "root" else _resolve_class(spec["class"])
        m = cls.__new__(cls)  # no constructor runs: the state comes from the record alone
        nn.Module.__init__(m)
        for k, v in (spec["attrs"].items() if kind == "torch" else ()):
            if _identifier(k, "attribute name") in _INTERNALS or k.startswith("__"):
                raise SavedModelError(f"attribute name {k!r} is reserved")
            m.__dict__[k] = _decode(v)
        for name, child in children.items():
            m.add_module(name, child)
    else:
        raise SavedModelError(f"unknown module kind {kind!r:.80}")
    for name, info in spec["parameters"].items():
        m.register_parameter(name, None if info is None else
                             nn.Parameter(tensors[path + name], requires_grad=bool(info["requires_grad"])))
    for name, info in spec["buffers"].items():
        m.register_buffer(name, None if info is None else tensors[path + name],
                          persistent=True if info is None else bool(info["persistent"]))
    return m


def save_quantized_model(model: nn.Module, path: Union[str, Path]) -> Path:
    """Write a model made by hwquant's quantization facades to `path` (atomically)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"save_quantized_model expects a quantized torch.nn.Module, got {type(model).__name__}")
    if not isinstance(model, fx.GraphModule) or not any(type(m) is InferableQuantizer for m in model.modules()):
        raise ValueError(f"{type(model).__name__} is not a model quantized by hwquant; quantize it first with "
                         "mct.ptq.pytorch_post_training_quantization")
    tensors: Dict[str, torch.Tensor] = {}
    modules = _spec(model, "", tensors, root=True)
    graph = [{"op": n.op, "name": n.name, "args": _encode(n.args, f"node '{n.name}'"),
              "target": _function_name(n.target) if n.op == "call_function" else n.target,
              "kwargs": _encode(n.kwargs, f"node '{n.name}'")} for n in model.graph.nodes]
    try:  # refuse now what the loader would refuse later
        _rebuild_graph(graph, model)
    except SavedModelError as e:
        raise ValueError(f"the model's graph cannot be saved loadably: {e}; {_HINT}") from None
    data = {"format": FORMAT, "version": VERSION, "class_name": type(model).__name__,
            "metadata": _encode(read_metadata(model), "metadata"), "modules": modules, "graph": graph,
            "tensors": tensors}
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return atomic_write(path, buffer.getvalue())


def load_quantized_model(path: Union[str, Path], map_location: Any = None) -> fx.GraphModule:
    """Rebuild a model written by `save_quantized_model` (in eval mode, with its metadata)."""
    path = Path(path)
    if not path.is_file():
        raise SavedModelError(f"no quantized-model file at '{path}'")
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated, corrupted, or holding objects beyond plain data
        raise SavedModelError(f"'{path}' is not a readable hwquant quantized-model file (truncated, corrupted, "
                              f"or holding objects other than plain data and tensors): {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SavedModelError(f"'{path}' is not a hwquant quantized-model file (no '{FORMAT}' tag; a plain state "
                              "dict or other torch file?); write one with save_quantized_model")
    if data.get("version") != VERSION:
        raise SavedModelError(f"'{path}' has format version {data.get('version')!r}; "
                              f"this hwquant reads version {VERSION}")
    try:
        return _rebuild(data)
    except SavedModelError as e:
        raise SavedModelError(f"'{path}': {e}") from e
    except Exception as e:  # a malformed record; nothing outside the allowlist was called
        raise SavedModelError(f"'{path}' holds a malformed model record: {type(e).__name__}: {e}") from e


def _rebuild(data: Dict[str, Any]) -> fx.GraphModule:
    tensors = data["tensors"]
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        raise SavedModelError("the tensor table holds non-tensor values")
    root = _build(data["modules"], "", tensors)
    graph = _rebuild_graph(data["graph"], root)
    model = fx.GraphModule(root, graph, class_name=_identifier(data["class_name"], "class name")).eval()
    if data.get("metadata") is not None:
        attach_metadata(model, _decode(data["metadata"]))
    return model


def _rebuild_graph(records: Any, root: nn.Module) -> fx.Graph:
    graph, env = fx.Graph(), {}
    for rec in records:
        op, name, target = rec["op"], _identifier(rec["name"], "node name"), rec["target"]
        args, kwargs = _decode(rec["args"], env), _decode(rec["kwargs"], env)
        if not (type(args) is tuple and type(kwargs) is dict):
            raise SavedModelError(f"node '{name}' has malformed arguments")
        for key in kwargs:  # fx writes keyword names verbatim into the generated code
            _identifier(key, "keyword argument")
        if op == "call_function":
            target = _resolve_function(target)
            if target is getattr and not (len(args) == 2 and _tensor_attr(args[1])):
                raise SavedModelError(f"node '{name}': getattr is allowed only with a literal public torch.Tensor "
                                      f"attribute name, not {args[1:]!r:.80}")
        elif op == "call_method":
            if not _tensor_attr(target):
                raise SavedModelError(f"method {target!r:.80} is not a public torch.Tensor method")
        elif op == "placeholder":
            _identifier(target.lstrip("*") if isinstance(target, str) else target, "input name")
        elif op in ("get_attr", "call_module"):
            if not (isinstance(target, str) and _PATH.match(target)):
                raise SavedModelError(f"node '{name}' has invalid target {target!r:.80}")
            if op == "get_attr" and not isinstance(functools.reduce(getattr, target.split("."), root), torch.Tensor):
                raise SavedModelError(f"node '{name}' reads '{target}', which is not a saved tensor")
        elif op != "output":
            raise SavedModelError(f"node '{name}' has unknown op {op!r:.80}")
        env[name] = graph.create_node(op, target, args, kwargs, name=name)
    return graph
