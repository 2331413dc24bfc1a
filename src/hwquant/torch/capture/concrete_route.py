"""Capture by tracing the model on the real representative inputs: the third route, tried when
torch.fx and torch.export both fail (models converted from ONNX compute shapes and operator parameters
from tensor values, which fx has no values for and torch.export refuses to guard on). What becomes a
constant, what is refused, how the batch is freed and the recorded sizes checked, and the rewrites
after the trace: docs/architecture.md, "Capture".

- Why a ``TorchFunctionMode`` and not ``make_fx(tracing_mode="real")``: the mode sees the calls the
  model's Python code makes (``torch.reshape``, ``F.interpolate``, ``x.view``, ``x + y``), the same
  functions and tensor methods torch.fx records, so the graph attaches to the TPC through the same
  table as an fx capture. make_fx records decomposed ATen operators, which would have to be grouped
  back into layers as the torch.export route does. The standard ``torch.nn`` layers (Conv2d, Linear,
  BatchNorm2d, ...) are kept as leaf modules, each recorded as one call of the layer itself, so their
  weights stay on layers the TPC knows; everything else (onnx2torch's modules, user modules) is traced
  through. Nothing process-wide is patched: the mode is thread-local and the layers' ``forward`` is
  wrapped on a private copy of the model.
- A constant enters the graph as a literal argument, or as a constant tensor (named after the model's
  own parameter or buffer when it is one); a refused read of values names the module, the operation
  and the source line.
- In-place operations are recorded as they run (the mutated tensor's later readers read the in-place
  operation's result) and made functional afterwards like fx's (fx_graph.functionalize_in_place_ops);
  ``x[i] = v`` on a tensor computed from the inputs is refused (no functional form for any index).
"""
from __future__ import annotations

import inspect
import operator
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.fx as fx
from torch import nn
from torch.fx.node import map_aggregate
from torch.fx.passes.shape_prop import TensorMetadata
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from hwquant.core.graph.model_graph import Graph, NodeKind
from hwquant.torch.deployment.custom_layers import is_custom_layer
from hwquant.torch.capture.decomposed_ops import fold_decomposed_ops
from hwquant.torch.capture.functional_layers import functional_calls_to_layers
from hwquant.torch.capture.fx_graph import (CaptureError, attr_value, fresh_name, frozen_layer, functionalize_in_place_ops,
                                    graph_from_fx, replace_nodes, source_line)

# The batch sizes of the two traces compared to free the batch.
_TRACE_BATCHES = (2, 3)

SIZE_REASON = ("the model was captured by tracing it on the representative inputs, with the sizes and values it "
               "computed from them recorded as constants (the torch.fx and torch.export captures failed); call it with "
               "inputs of the recorded shape, or write the forward with tensor operations so that torch.fx can capture it")


class ConcreteTraceError(CaptureError):
    """The real-input trace met a construct it cannot record; `advice` says what to change."""

    def __init__(self, message: str, advice: str):
        super().__init__(message)
        self.advice = advice


# Reads of a traced tensor that return facts of its shape, type or identity, not of its values (properties
# that return no tensor, .shape, .dtype, ..., are such facts too).
_METADATA = {"size", "dim", "ndimension", "numel", "nelement", "__len__", "element_size", "stride", "is_contiguous",
             "is_floating_point", "is_complex", "is_signed", "get_device", "storage_offset", "data_ptr", "__hash__",
             "has_names", "is_pinned", "__repr__", "__str__", "__format__"}  # (printing inside a forward)

# Python operators on tensors, recorded as torch.fx records them: (operator function, operands swapped).
_OPERATORS = {
    "__getitem__": (operator.getitem, False), "__add__": (operator.add, False), "__radd__": (operator.add, True),
    "__sub__": (operator.sub, False), "__rsub__": (operator.sub, True), "__mul__": (operator.mul, False),
    "__rmul__": (operator.mul, True), "__truediv__": (operator.truediv, False), "__div__": (operator.truediv, False),
    "__rtruediv__": (operator.truediv, True), "__rdiv__": (operator.truediv, True),
    "__floordiv__": (operator.floordiv, False), "__rfloordiv__": (operator.floordiv, True),
    "__mod__": (operator.mod, False), "__rmod__": (operator.mod, True), "__pow__": (operator.pow, False),
    "__rpow__": (operator.pow, True), "__matmul__": (operator.matmul, False), "__rmatmul__": (operator.matmul, True),
    "__neg__": (operator.neg, False), "__pos__": (operator.pos, False), "__abs__": (operator.abs, False),
    "__invert__": (operator.invert, False), "__and__": (operator.and_, False), "__rand__": (operator.and_, True),
    "__or__": (operator.or_, False), "__ror__": (operator.or_, True), "__xor__": (operator.xor, False),
    "__rxor__": (operator.xor, True), "__lshift__": (operator.lshift, False), "__rshift__": (operator.rshift, False),
    "__eq__": (operator.eq, False), "__ne__": (operator.ne, False), "__lt__": (operator.lt, False),
    "__le__": (operator.le, False), "__gt__": (operator.gt, False), "__ge__": (operator.ge, False),
}
# `x += y` and the like: the in-place tensor method (made functional after capture).
_IN_PLACE_OPERATORS = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_",
                       "__idiv__": "div_", "__ifloordiv__": "floor_divide_", "__imod__": "remainder_",
                       "__ipow__": "pow_", "__iand__": "bitwise_and_", "__ior__": "bitwise_or_",
                       "__ixor__": "bitwise_xor_", "__ilshift__": "bitwise_left_shift_",
                       "__irshift__": "bitwise_right_shift_"}


def _is_leaf_layer(module: nn.Module) -> bool:
    """A standard torch layer, recorded whole (torch.fx's default leaves: torch.nn but its containers), or one of
    Sony's edge-mdt-cl layers (custom_layers.py)."""
    return type(module).__module__.startswith(("torch.nn", "torch.ao.nn")) and not isinstance(
        module, (nn.Sequential, nn.ModuleList, nn.ModuleDict)) or is_custom_layer(module)


def _function_name(func: Callable) -> str:
    name = getattr(func, "__name__", repr(func))
    if name == "__get__":  # a tensor property read: Tensor.shape.__get__
        return "get:" + getattr(getattr(func, "__self__", None), "__name__", "?")
    return name


@dataclass(frozen=True)
class _Ref:
    """A value computed from the model's inputs (index into the trace's values)."""
    index: int


@dataclass(frozen=True)
class _Const:
    """A constant tensor (index into the trace's constants)."""
    index: int


@dataclass
class _Record:
    op: str  # "call_function" | "call_method" | "call_module"
    target: Any
    args: tuple
    kwargs: dict
    scope: str  # the module whose code made the call (path in the model)
    scope_type: str
    output: int = -1  # the value index it produced (-1: a structure, read through getitem records)
    meta: Any = None  # shapes and dtypes of the result (what ShapeProp would write, without another run)


@dataclass
class _Trace:
    n_inputs: int
    records: List[_Record] = field(default_factory=list)
    constants: List[torch.Tensor] = field(default_factory=list)
    constant_names: List[Optional[str]] = field(default_factory=list)
    output: Any = None
    n_values: int = 0
    input_meta: List[Any] = field(default_factory=list)


def _any_item(structure: Any, pred: Callable[[Any], bool]) -> bool:
    """Whether `pred` holds for an item of `structure` (through lists, tuples, dicts and slices)."""
    if isinstance(structure, (list, tuple)):
        return any(_any_item(s, pred) for s in structure)
    if isinstance(structure, dict):
        return any(_any_item(s, pred) for s in structure.values())
    if isinstance(structure, slice):
        return any(_any_item(s, pred) for s in (structure.start, structure.stop, structure.step))
    return pred(structure)


def _tensor_metadata(t: torch.Tensor) -> TensorMetadata:
    # the fields graph_from_fx reads (shape, dtype); torch's own extraction also classifies the memory
    # format, which costs more than the operation on small tensors
    return TensorMetadata(t.shape, t.dtype, t.requires_grad, t.stride(), None, False, {})


def _metadata(result: Any) -> Any:
    return map_aggregate(result, lambda v: _tensor_metadata(v) if isinstance(v, torch.Tensor) else None)


def _user_site() -> str:
    """file:line: code of the innermost frame outside torch and this module (where the model made the call)."""
    torch_dir = os.path.dirname(torch.__file__)
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(torch_dir) and filename != __file__:
            return f"{filename}:{frame.f_lineno}: {source_line(frame)}"
        frame = frame.f_back
    return ""


class _Tracer(TorchFunctionMode):
    """Records the tensor operations that read values computed from the model's inputs."""

    def __init__(self, model: nn.Module, n_inputs: int):
        super().__init__()
        self.trace = _Trace(n_inputs)
        self.values: WeakIdKeyDictionary = WeakIdKeyDictionary()  # traced tensor -> value index
        self.constant_index: Dict[int, int] = {}
        self._alive: List[torch.Tensor] = []  # constants stay alive, so that their ids stay theirs
        self.names = {id(t): n for n, t in list(model.named_parameters(remove_duplicate=False))
                      + list(model.named_buffers(remove_duplicate=False))}
        self.leaf_depth = 0
        self.scopes: List[Tuple[str, str]] = [("", type(model).__name__)]
        # the named tuples Sony's custom layers returned (NMSResults) by id -> (the tuple, its value index): returned
        # whole by the model, the graph returns the layer's own result, of its own type
        self.named_tuples: Dict[int, Tuple[Any, int]] = {}

    # ---- values ------------------------------------------------------------------------------
    def new_value(self, tensor: torch.Tensor) -> int:
        index = self.trace.n_values
        self.trace.n_values += 1
        self.values[tensor] = index
        return index

    def is_traced(self, structure: Any) -> bool:
        return _any_item(structure, lambda t: isinstance(t, torch.Tensor) and t in self.values)

    def _constant(self, tensor: torch.Tensor) -> _Const:
        key = id(tensor)
        if key not in self.constant_index:
            self.constant_index[key] = len(self.trace.constants)
            self._alive.append(tensor)
            # a copy: an in-place operation later in the forward must not change the recorded value
            self.trace.constants.append(tensor.detach().clone())
            self.trace.constant_names.append(self.names.get(key))
        return _Const(self.constant_index[key])

    def argument(self, value: Any) -> Any:
        """A call argument as the record keeps it: traced tensors as references, other tensors as constants,
        numpy scalars as Python numbers."""
        if isinstance(value, torch.Tensor):
            index = self.values.get(value)
            return _Ref(index) if index is not None else self._constant(value)
        if isinstance(value, torch.Size):
            return tuple(int(v) for v in value)
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (list, tuple)):
            items = [self.argument(v) for v in value]
            return type(value)(items) if type(value) in (list, tuple) else tuple(items)
        if isinstance(value, dict):
            return {k: self.argument(v) for k, v in value.items()}
        if isinstance(value, slice):  # onnx2torch slices with one-element constant tensors: their integers
            return slice(*(self._index(v) for v in (value.start, value.stop, value.step)))
        if value is None or value is Ellipsis or isinstance(value, (bool, int, float, complex, str, torch.dtype,
                                                                    torch.device, torch.memory_format, torch.layout)):
            return value
        raise self.error(f"passes a {type(value).__name__} to a tensor operation",
                         "pass tensors, numbers, tuples / lists of them, or shapes")

    def _index(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value not in self.values and value.numel() == 1 \
                and not value.is_floating_point() and not value.is_complex():
            return int(value.item())
        return self.argument(value)

    # ---- records -----------------------------------------------------------------------------
    def record(self, op: str, target: Any, args: tuple, kwargs: dict, result: Any) -> Any:
        self._store(_Record(op, target, self.argument(tuple(args)), self.argument(dict(kwargs)), *self.scopes[-1],
                            meta=_metadata(result)), result)
        return result

    def _store(self, rec: _Record, value: Any) -> None:
        """Append `rec`, which yields `value`: a tensor, or a structure whose tensors getitem records read."""
        self.trace.records.append(rec)
        if isinstance(value, torch.Tensor):
            rec.output = self.new_value(value)
            return
        rec.output = self.trace.n_values
        self.trace.n_values += 1  # the structure itself, read by getitem records
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if self._has_tensor(item):
                self._store(_Record("call_function", operator.getitem, (_Ref(rec.output), key), {}, rec.scope,
                                    rec.scope_type, meta=_metadata(item)), item)

    @staticmethod
    def _has_tensor(structure: Any) -> bool:
        return _any_item(structure, lambda t: isinstance(t, torch.Tensor))

    def error(self, what: str, advice: str) -> ConcreteTraceError:
        scope, scope_type = self.scopes[-1]
        site = _user_site()
        where = f"{scope_type} ('{scope}')" if scope else scope_type
        return ConcreteTraceError(f"{where} {what}" + (f"\n  at {site}" if site else ""), advice)

    # ---- the mode ----------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.leaf_depth or not self.is_traced((args, kwargs)):
            return func(*args, **kwargs)  # inside a recorded layer, or a constant computation
        name = _function_name(func)
        if name in _METADATA:
            return func(*args, **kwargs)
        if name == "__setitem__":
            raise self.error("writes into a tensor where tensors computed from the inputs are involved "
                             "(x[index] = value)",
                             "write it with tensor operations (torch.where with a mask, torch.cat of the parts, "
                             "Tensor.index_put or torch.slice_scatter, which return a new tensor)")
        result = func(*args, **kwargs)
        if name.startswith("get:") and not self._has_tensor(result):
            return result  # a property of the tensor, not its values
        if not self._has_tensor(result):
            raise self.error(
                f"reads the values of a tensor computed from the model's inputs ({name}): recorded as a constant, "
                "the value would hold for the representative inputs only",
                "compute with tensor operations instead of reading values into Python (torch.where or masking for "
                "an if on a tensor, tensor arithmetic instead of .item() / .tolist() / .numpy()), or move that code "
                "out of the model's forward")
        if name.startswith("get:"):
            return self._property(name[4:], args[0], result)
        if name == "__getitem__" and isinstance(args[1], list) \
                and any(isinstance(i, slice) or i is None or i is Ellipsis for i in args[1]):
            args = (args[0], tuple(args[1]))  # what torch reads a list of slices as (deprecated spelling)
        if name in _OPERATORS:
            fn, swapped = _OPERATORS[name]
            return self.record("call_function", fn, (args[1], args[0], *args[2:]) if swapped else args, kwargs, result)
        if name in _IN_PLACE_OPERATORS:
            return self.record("call_method", _IN_PLACE_OPERATORS[name], args, kwargs, result)
        if getattr(torch.Tensor, name, None) is func or getattr(torch._C.TensorBase, name, None) is func:
            return self.record("call_method", name, args, kwargs, result)
        return self.record("call_function", func, args, kwargs, result)

    def _property(self, name: str, tensor: torch.Tensor, result: Any) -> Any:
        """Tensor properties that return a tensor, recorded as the method computing the same."""
        if name == "T":
            return self.record("call_method", "permute", (tensor, *reversed(range(tensor.dim()))), {}, result)
        if name == "mT":
            return self.record("call_method", "transpose", (tensor, -2, -1), {}, result)
        if name == "data":
            return self.record("call_method", "detach", (tensor,), {}, result)
        if name == "real" and not tensor.is_complex():
            self.values[result] = self.values[tensor]  # the tensor itself
            return result
        raise self.error(f"reads the attribute .{name} of a tensor computed from the inputs",
                         f"compute it with a tensor method instead of .{name}")


def _wrap_modules(model: nn.Module, tracer: _Tracer) -> Callable[[], None]:
    """Wrap every module's forward on the (private) model: standard layers are recorded whole, the others
    name the scope of the calls made inside them. Returns the function that removes the wrappers."""
    restore = []
    for path, module in model.named_modules(remove_duplicate=False):
        had_own = "forward" in vars(module)
        original = module.forward

        def wrapped(*args, __original=original, __module=module, __path=path, **kwargs):
            if tracer.leaf_depth or not __path or not _is_leaf_layer(__module):
                tracer.scopes.append((__path, type(__module).__name__))
                try:
                    return __original(*args, **kwargs)
                finally:
                    tracer.scopes.pop()
            if not tracer.is_traced((args, kwargs)):
                return __original(*args, **kwargs)
            tracer.leaf_depth += 1
            try:
                result = __original(*args, **kwargs)
            finally:
                tracer.leaf_depth -= 1
            if not tracer._has_tensor(result):
                raise tracer.error(f"calls layer '{__path}' ({type(__module).__name__}), which returns no tensor",
                                   "call the layer where its output is a tensor")
            at = len(tracer.trace.records)
            recorded = tracer.record("call_module", __path, args, kwargs, result)
            if is_custom_layer(__module) and hasattr(result, "_fields"):
                tracer.named_tuples[id(result)] = (result, tracer.trace.records[at].output)
            return recorded

        module.forward = wrapped
        restore.append((module, had_own, original))

    def undo():
        for module, had_own, original in restore:
            if had_own:
                module.forward = original
            else:
                del module.forward
    return undo


def _trace(model: nn.Module, inputs: Sequence[torch.Tensor]) -> _Trace:
    tracer = _Tracer(model, len(inputs))
    inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]  # the model may write into them
    for x in inputs:
        tracer.new_value(x)
        tracer.trace.input_meta.append(_metadata(x))
    undo = _wrap_modules(model, tracer)
    try:
        with torch.no_grad(), tracer:
            out = model(*inputs)
    finally:
        undo()
    tracer.scopes = [("", type(model).__name__)]

    def output(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return tracer.argument(value)
        if tracer.named_tuples.get(id(value), (None,))[0] is value:
            return _Ref(tracer.named_tuples[id(value)][1])
        if isinstance(value, (list, tuple)):
            return type(value)(output(v) for v in value) if type(value) in (list, tuple) else tuple(
                output(v) for v in value)
        if isinstance(value, dict):
            return {k: output(v) for k, v in value.items()}
        raise ConcreteTraceError(f"{type(model).__name__} returns a {type(value).__name__}",
                                 "return only tensors (or tuples / lists / dicts of tensors)")
    tracer.trace.output = output(out)
    return tracer.trace


# ---- comparing two traces: which integers follow the batch size ----------------------------------
class _Mismatch(Exception):
    pass


def _compare(a: Any, b: Any, ta: _Trace, tb: _Trace, path: tuple, ints: Dict[tuple, Tuple[int, int]]) -> None:
    if type(a) is not type(b):
        raise _Mismatch(path)
    if isinstance(a, _Const):
        ca, cb = ta.constants[a.index], tb.constants[b.index]
        if a.index != b.index or ta.constant_names[a.index] != tb.constant_names[b.index] or ca.dtype != cb.dtype \
                or ca.shape != cb.shape or not torch.equal(ca, cb):
            raise _Mismatch(path)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise _Mismatch(path)
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, ta, tb, path + (i,), ints)
    elif isinstance(a, dict):
        if a.keys() != b.keys():
            raise _Mismatch(path)
        for k in a:
            _compare(a[k], b[k], ta, tb, path + (k,), ints)
    elif isinstance(a, slice):
        for k in ("start", "stop", "step"):
            _compare(getattr(a, k), getattr(b, k), ta, tb, path + (k,), ints)
    elif isinstance(a, int) and not isinstance(a, bool):
        if a != b:
            ints[path] = (a, b)
    elif a != b:
        raise _Mismatch(path)


def _batch_integers(ta: _Trace, tb: _Trace) -> Optional[Dict[tuple, Tuple[int, int]]]:
    """{(record, argument path): (k, c)} for the integers that are k * batch + c, or None when the traces
    differ otherwise (another structure, a constant tensor that follows the batch)."""
    if len(ta.records) != len(tb.records) or ta.n_inputs != tb.n_inputs:
        return None
    ints: Dict[tuple, Tuple[int, int]] = {}
    try:
        for i, (ra, rb) in enumerate(zip(ta.records, tb.records)):
            if ra.op != rb.op or ra.target != rb.target or ra.output != rb.output:
                return None
            _compare((ra.args, ra.kwargs), (rb.args, rb.kwargs), ta, tb, (i,), ints)
        _compare(ta.output, tb.output, ta, tb, ("output",), {})
    except _Mismatch:
        return None
    (ba, bb) = _TRACE_BATCHES
    result = {}
    for path, (va, vb) in ints.items():
        k, rest = divmod(vb - va, bb - ba)
        if rest:
            return None
        result[path] = (k, va - k * ba)
    return result


# ---- the fx graph of a trace -----------------------------------------------------------------
def _emit(model: nn.Module, trace: _Trace, batch_ints: Dict[tuple, Tuple[int, int]], name: str) -> fx.GraphModule:
    g = fx.Graph()
    root: Dict[str, Any] = {}
    params = inspect.signature(model.forward).parameters
    names = [p for p, v in params.items() if v.kind in (v.POSITIONAL_ONLY, v.POSITIONAL_OR_KEYWORD)]
    env: Dict[int, fx.Node] = {}
    for i in range(trace.n_inputs):
        env[i] = g.placeholder(names[i] if i < len(names) else f"input_{i}")
        env[i].meta["tensor_meta"] = trace.input_meta[i]
    constants: Dict[int, fx.Node] = {}
    batch_exprs: Dict[Tuple[int, int], fx.Node] = {}

    def constant(index: int) -> fx.Node:
        if index not in constants:
            target = trace.constant_names[index] or f"_tensor_constant{index}"
            root[target] = trace.constants[index]
            constants[index] = g.get_attr(target)
            constants[index].meta["tensor_meta"] = _metadata(trace.constants[index])
        return constants[index]

    def batch_expr(k: int, c: int) -> fx.Node:
        if (k, c) not in batch_exprs:
            if "batch" not in batch_exprs:
                batch_exprs["batch"] = g.call_method("size", (env[0], 0))
            expr = batch_exprs["batch"]
            if k != 1:
                expr = g.call_function(operator.mul, (expr, k))
            if c:
                expr = g.call_function(operator.add, (expr, c))
            batch_exprs[(k, c)] = expr
        return batch_exprs[(k, c)]

    def build(value: Any, path: tuple) -> Any:
        if path in batch_ints:
            return batch_expr(*batch_ints[path])
        if isinstance(value, _Ref):
            return env[value.index]
        if isinstance(value, _Const):
            return constant(value.index)
        if isinstance(value, (list, tuple)):
            return type(value)(build(v, path + (i,)) for i, v in enumerate(value))
        if isinstance(value, dict):
            return {k: build(v, path + (k,)) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(*(build(getattr(value, k), path + (k,)) for k in ("start", "stop", "step")))
        return value

    for i, rec in enumerate(trace.records):
        args, kwargs = build((rec.args, rec.kwargs), (i,))
        if rec.op == "call_module":
            root[rec.target] = model.get_submodule(rec.target)
        node = g.create_node(rec.op, rec.target, tuple(args), kwargs)
        node.meta["nn_module_stack"] = {rec.scope: (rec.scope, rec.scope_type)}
        node.meta["tensor_meta"] = rec.meta
        env[rec.output] = node
    g.output(build(trace.output, ("output",)))
    return fx.GraphModule(root, g, name)


def _matmuls_to_linear(gm: fx.GraphModule) -> int:
    """torch.matmul(x, W) with W a 2-D constant (and + b, b a 1-D constant of W's columns) -> nn.Linear."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (torch.matmul, operator.matmul) or len(node.args) != 2:
            continue
        w_node = node.args[1]
        weight = attr_value(gm, w_node)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
            continue
        bias, add = None, None
        users = list(node.users)
        if len(users) == 1 and users[0].op == "call_function" and users[0].target in (torch.add, operator.add) \
                and len(users[0].args) == 2 and not users[0].kwargs:
            other = users[0].args[1] if users[0].args[0] is node else users[0].args[0]
            b = attr_value(gm, other)
            if isinstance(b, torch.Tensor) and b.dim() == 1 and b.shape[0] == weight.shape[1] and b.dtype == weight.dtype:
                bias, add = b, users[0]
        layer = frozen_layer(nn.Linear(weight.shape[0], weight.shape[1], bias=bias is not None, device="meta"),
                             weight.t().contiguous(), bias)
        name = fresh_name(gm, str(w_node.target).replace(".", "_") + "_linear")
        gm.add_submodule(name, layer)
        replace_nodes(gm, add or node, [node] if add is None else [node, add], "call_module", name, (node.args[0],))
        count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.delete_all_unused_submodules()
        gm.recompile()
    return count


# ---- the route ------------------------------------------------------------------------------
def _batched(inputs: Sequence[torch.Tensor], size: int) -> List[torch.Tensor]:
    """The inputs at another batch size: their first samples, repeated when there are fewer."""
    index = torch.arange(size) % inputs[0].shape[0]
    return [x[index.to(x.device)] for x in inputs]


def _same_outputs(gm: fx.GraphModule, model: nn.Module, inputs: Sequence[torch.Tensor]) -> bool:
    with torch.no_grad():
        try:
            got = torch.utils._pytree.tree_leaves(gm(*inputs))
        except Exception:  # noqa: BLE001 - the generalised graph does not run at this batch size
            return False
        want = torch.utils._pytree.tree_leaves(model(*inputs))
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            scale = float(b.abs().max()) if b.numel() else 0.0
            if not torch.allclose(a, b, rtol=1e-4, atol=1e-5 * max(scale, 1e-12)):
                return False
        elif not torch.equal(a, b):
            return False
    return True


def _free_batch_graph(model: nn.Module, inputs: Sequence[torch.Tensor], name: str) -> Optional[fx.GraphModule]:
    """The graph with its batch-size integers computed from the first input's size, when the model allows it."""
    if not inputs or any(not isinstance(x, torch.Tensor) or x.dim() == 0 for x in inputs) \
            or len({x.shape[0] for x in inputs}) != 1:
        return None
    try:
        traces = [_trace(model, _batched(inputs, b)) for b in _TRACE_BATCHES]
    except ConcreteTraceError:
        raise  # a refused construct: the same at any batch size
    except Exception:  # noqa: BLE001 - the model runs at its own batch size only
        return None
    batch_ints = _batch_integers(*traces)
    if batch_ints is None:
        return None
    gm = _emit(model, traces[0], batch_ints, name)
    # batch 1, outside the two traced sizes: what the exporter traces
    return gm if _same_outputs(gm, model, _batched(inputs, 1)) else None


def capture_with_concrete_trace(model: nn.Module, example_inputs: Sequence[torch.Tensor], name: str) -> Graph:
    """The core graph of `model` (an eval-mode copy the caller owns) traced on `example_inputs`, with the
    recorded input sizes as checks on its INPUT nodes."""
    gm = _free_batch_graph(model, example_inputs, name)
    free_batch = gm is not None
    if gm is None:
        gm = _emit(model, _trace(model, example_inputs), {}, name)
    functional_calls_to_layers(gm)
    _matmuls_to_linear(gm)
    fold_decomposed_ops(gm)
    functionalize_in_place_ops(gm)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    graph = graph_from_fx(gm, name)  # (shapes recorded by the trace: those of batch 2 when the batch is free)
    for node, x in zip([n for n in graph if n.kind == NodeKind.INPUT], example_inputs):
        if isinstance(x, torch.Tensor) and x.dim():
            node.framework_attr["size_ranges"] = {d: (int(s), int(s)) for d, s in enumerate(x.shape)
                                                  if d or not free_batch}
            node.framework_attr["size_reason"] = SIZE_REASON
    return graph
