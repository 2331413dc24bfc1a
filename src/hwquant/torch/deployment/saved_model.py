"""Save and load a quantized PyTorch model as plain data, so that loading runs no arbitrary pickle.

File format: ``torch.save`` of one dict holding only str, int, float, bool, None, lists, dicts and
tensors, so it opens with ``torch.load(path, weights_only=True)``::

    {"format": "hwquant.quantized_model", "version": 1, "class_name": str,
     "metadata": value,                       # the model's hwquant_metadata
     "modules": spec,                         # the module tree, from the root
     "graph": [{"op", "name", "target", "args", "kwargs"}, ...],   # the torch.fx nodes in order
     "tensors": {"path.to.param": tensor}}    # every parameter and buffer (non-persistent ones too)

A module spec is ``{"kind", "parameters", "buffers", "children"}`` plus, by kind: ``holder`` (its
quantizer's description: method, bits, params, channel axis, target), ``wrapper`` (its layer as the
child, one quantizer description per quantized weight, whose float value is the wrapper's parameter),
``torch`` (``"class"``: a qualified name under torch.nn, and ``"attrs"``: its plain attributes) or
``root``. Values that JSON lacks (tuples, dicts with any keys, graph node references, slices,
Ellipsis, dtypes, devices, memory formats, layouts, torch.Size) are dicts tagged by ``"$"``.

Safety argument: with ``weights_only=True`` torch.load builds nothing but those plain types and
tensors. Everything executable is then named by a string and resolved, by walking attributes (nothing
is imported), only inside the explicit allowlists of ``load_allowlist``: the listed torch.nn layer
classes (made with ``__new__``, so no constructor runs), the three hwquant quantizer classes (their
constructors take the recorded plain values), and pure tensor operations (torch's own list of tensor
operations less hooks, storage and file access; bounded tensor factories; ATen operators; listed
operator / math functions; getattr/len/int/float/slice). A process-wide setter such as
``torch.set_default_dtype`` or anything that imports by name is not on any list. ``getattr`` takes
only a literal public torch.Tensor attribute name, so no chain of attribute reads leaves the tensor
world. Names fx writes verbatim into the generated code (node, input and keyword names) must be
identifiers, and module paths word characters. Each layer's tensors must have the shapes its
attributes imply, and each quantizer's parameters one value or one per channel.
"""
from __future__ import annotations

import functools
import io
import keyword
import re
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np
import torch
from torch import fx, nn

import hwquant.torch.distributed  # noqa: F401 (registers this process's rank: rank 0 alone writes files)
from hwquant.concurrency import framework_call
from hwquant.errors import HwquantError
from hwquant.fileio import atomic_write
from hwquant.torch.deployment import load_allowlist as allowlist
from hwquant.torch.deployment.metadata import attach_metadata, read_metadata
from hwquant.torch.quantizers import (InferableQuantizer, PytorchActivationQuantizationHolder,
                                      PytorchQuantizationWrapper, make_inferable_quantizer, quantizer_slots)

FORMAT = "hwquant.quantized_model"
VERSION = 1


class SavedModelError(HwquantError, ValueError):
    """A file is not a loadable hwquant quantized model, or names something outside the allowlist."""


_HINT = "export the model to ONNX or TorchScript instead"
_INTERNALS = frozenset(vars(nn.Module()))  # nn.Module's own bookkeeping, rebuilt by nn.Module.__init__
# derived from a layer's parameters and rebuilt from them on load (a recurrent layer's list of its weights)
_DERIVED = {nn.RNNBase: ("_flat_weights", "_flat_weight_refs")}
_TORCH_VALUES = {"dtype": torch.dtype, "memory_format": torch.memory_format, "layout": torch.layout}
_NAME = re.compile(r"[A-Za-z_]\w*\Z")
_PATH = re.compile(r"\w+(\.\w+)*\Z")  # module paths may hold Sequential indices ("body.0")


def _identifier(name: Any, what: str) -> str:
    if not (isinstance(name, str) and _NAME.match(name) and not keyword.iskeyword(name)):
        raise SavedModelError(f"invalid {what} {name!r:.80} in the model record")
    return name


def _resolve_function(name: Any) -> Any:
    """The function recorded as `name`, looked up only inside the allowlist."""
    fn = allowlist.resolve_function(name)
    if fn is None:
        raise SavedModelError(f"function {name!r:.80} is not in the allowlist of pure tensor operations (torch, "
                              "torch.nn.functional and torch.Tensor tensor operations, tensor factories, "
                              "torch.ops.aten, operator, math, getattr/len/int/float/slice)")
    return fn


def _function_name(fn: Any) -> str:
    name = allowlist.function_name(fn)
    if name is None:
        raise ValueError(f"the model calls {fn!r}, which is outside the allowlist of loadable functions; {_HINT}")
    return name


def _resolve_class(name: Any, strict: bool = True) -> Optional[type]:
    short = name.rpartition(".")[2] if isinstance(name, str) else None
    obj = getattr(nn, short, None) if short in allowlist.LAYER_CLASSES else None
    if isinstance(obj, type) and issubclass(obj, nn.Module) and _class_name(obj) == name:
        return obj
    if not strict:
        return None
    raise SavedModelError(f"module class {name!r:.80} is not in the allowlist of layer classes (the standard "
                          "torch.nn layers and hwquant's quantizer modules)")


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


def _quantizer_spec(q: Any, where: str) -> Dict[str, Any]:
    if not isinstance(q, InferableQuantizer):
        raise ValueError(f"{where}: quantizer {type(q).__name__} is not one of hwquant's inferable quantizers "
                         "(finalize a QAT / GPTQ model first); " + _HINT)
    return {"method": int(q.method.value), "num_bits": int(q.num_bits), "params": _encode(q.params, where),
            "channel_axis": _encode(q.channel_axis, where), "target": _encode(q.target, where)}


def _quantizer(spec: Dict[str, Any], where: str, weight: Optional[torch.Tensor] = None) -> InferableQuantizer:
    params, axis = _decode(spec["params"]), _decode(spec["channel_axis"])
    if not isinstance(params, dict):
        raise SavedModelError(f"{where}: malformed quantizer parameters")
    if axis is None and any(np.size(v) != 1 for k, v in params.items() if k in ("threshold", "range_min", "range_max")):
        raise SavedModelError(f"{where}: a per-tensor quantizer holds several values")
    try:
        return make_inferable_quantizer(spec["method"], spec["num_bits"], params, axis, _decode(spec["target"]),
                                        input_rank=None if weight is None else weight.dim())
    except (ValueError, KeyError, TypeError, AssertionError) as e:
        raise SavedModelError(f"{where}: invalid quantizer ({type(e).__name__}: {e})") from None


def _spec(m: nn.Module, path: str, tensors: Dict[str, torch.Tensor], root: bool = False,
          moved: tuple = ()) -> Dict[str, Any]:
    """``moved``: the attributes a wrapper took over as its own parameters (not recorded on the layer)."""
    kind = type(m)
    where = f"module '{path[:-1] or '<root>'}' ({kind.__name__})"
    if root:
        spec: Dict[str, Any] = {"kind": "root"}
    elif kind is PytorchActivationQuantizationHolder:
        spec = {"kind": "holder", "quantizer": _quantizer_spec(m.activation_holder_quantizer, where)}
    elif kind is PytorchQuantizationWrapper:
        if m._modules.get("trainable_quantizers"):
            raise ValueError(f"{where}: holds trainable quantizers (finalize the QAT / GPTQ model first); {_HINT}")
        spec = {"kind": "wrapper", "quantizers": {k: _quantizer_spec(q, f"{where}, weight '{k}'")
                                                  for k, q in m.weights_quantizers.items()}}
    elif kind.__module__.startswith("torch.nn.") and _resolve_class(_class_name(kind), strict=False) is kind:
        derived = {a for base, names in _DERIVED.items() if isinstance(m, base) for a in names}
        attrs = {k: _encode(v, f"{where}, attribute '{k}'") for k, v in vars(m).items()
                 if k not in _INTERNALS and k not in moved and k not in derived}
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
    inner = tuple(m.weights_quantizers) if kind is PytorchQuantizationWrapper else ()
    spec["children"] = [[n, None if c is None else _spec(c, f"{path}{n}.", tensors, moved=inner if n == "layer" else ())]
                        for n, c in m._modules.items() if not (kind is PytorchQuantizationWrapper and n != "layer")]
    return spec


def _build(spec: Dict[str, Any], path: str, tensors: Dict[str, Any]) -> nn.Module:
    children = {n: None if s is None else _build(s, f"{path}{n}.", tensors) for n, s in spec["children"]}
    kind, where = spec["kind"], f"module '{path[:-1]}'"
    if kind == "holder":
        m: nn.Module = PytorchActivationQuantizationHolder(_quantizer(spec["quantizer"], where))
    elif kind == "wrapper":
        layer = children.get("layer")
        if not isinstance(layer, nn.Module) or not isinstance(spec.get("quantizers"), dict):
            raise SavedModelError(f"{where}: malformed wrapper record")
        quantizers = {}
        for name, qspec in spec["quantizers"].items():
            weight = tensors.get(path + _identifier(name, "weight name"))
            if weight is None or name not in spec["parameters"]:
                raise SavedModelError(f"{where}: no float weight '{name}' for its quantizer")
            setattr(layer, name, weight)  # the wrapper takes it over as its parameter
            quantizers[name] = _quantizer(qspec, f"{where}, weight '{name}'", weight)
        try:
            allowlist.check_layer_tensors(layer, f"module '{path}layer' ({type(layer).__name__})")
            allowlist.check_weight_quantizers(layer, quantizers, where)
        except ValueError as e:
            raise SavedModelError(str(e)) from None
        m = PytorchQuantizationWrapper(layer, quantizers)
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
    if isinstance(m, nn.RNNBase):
        m._init_flat_weights()  # (the wrapper's setattr of a quantized weight then updates this list)
    if kind == "torch":
        try:
            allowlist.check_layer_tensors(m, f"module '{path[:-1]}' ({type(m).__name__})")
        except ValueError as e:
            raise SavedModelError(str(e)) from None
    return m


@framework_call
def save_quantized_model(model: nn.Module, path: Union[str, Path]) -> Path:
    """Write a model made by hwquant's quantization facades to `path` (atomically)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"save_quantized_model expects a quantized torch.nn.Module, got {type(model).__name__}")
    if not isinstance(model, fx.GraphModule) or not any(True for _ in quantizer_slots(model)):
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
            "holders": _encode(dict(getattr(model, "node_to_activation_quantization_holder", {})), "holders"),
            "tensors": tensors}
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return atomic_write(path, buffer.getvalue())


@framework_call
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
    holders = _decode(data.get("holders", {}))
    if not (isinstance(holders, dict) and all(isinstance(k, str) and isinstance(v, str) and
                                              isinstance(getattr(root, v, None), PytorchActivationQuantizationHolder)
                                              for k, v in holders.items())):
        raise SavedModelError("the holder table names modules that are not activation holders")
    model.node_to_activation_quantization_holder = holders
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
        if op in ("call_function", "call_method"):
            try:
                allowlist.check_factory_sizes(target if op == "call_method" else _resolve_function(target), args, kwargs)
            except ValueError as e:
                raise SavedModelError(f"node '{name}': {e}") from None
        if op == "call_function":
            target = _resolve_function(target)
            if target is getattr and not (len(args) == 2 and allowlist.tensor_attribute(args[1])):
                raise SavedModelError(f"node '{name}': getattr is allowed only with a literal public torch.Tensor "
                                      f"attribute name, not {args[1:]!r:.80}")
        elif op == "call_method":
            if not allowlist.tensor_method(target):
                raise SavedModelError(f"method {target!r:.80} is not a public torch.Tensor method in the allowlist "
                                      "of pure tensor operations")
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
