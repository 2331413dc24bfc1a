"""Capture a PyTorch model into the framework-free core graph.

torch.fx symbolic tracing first (it keeps layers as layers); when it cannot trace the model (Python
control flow on tensor values or shapes, unsupported constructs), torch.export is tried, which
specialises shape-dependent control flow on the example inputs (see `export_route.py`); when that
fails too (values read from tensors: models converted from ONNX), the model is traced on the real
inputs with those values recorded as constants (see `concrete_route.py`). A model no route captures
gets a `CaptureError` saying where and why each route failed, and what to do.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import io
import sys
import threading
import traceback
from typing import Any, Dict, Sequence, Tuple

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp

from hwquant.concurrency import FRAMEWORK_STATE
from hwquant.logger import logger
from hwquant.core.graph.model_graph import Graph
from hwquant.torch.capture.concrete_route import ConcreteTraceError, capture_with_concrete_trace
from hwquant.torch.deployment.custom_layers import is_custom_layer
from hwquant.torch.capture.export_route import capture_with_export
from hwquant.torch.capture.functional_layers import functional_calls_to_layers
from hwquant.torch.capture.fx_graph import CaptureError, functionalize_in_place_ops, graph_from_fx, source_line


def _failure_site(exc: BaseException) -> Tuple[str, str]:
    """(module class and name, source line) of the innermost user-module frame of a trace failure."""
    site, line = "the model", ""
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        self_obj = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None  # the method's `self`
        if isinstance(self_obj, torch.nn.Module) and "torch/fx" not in frame.f_code.co_filename \
                and "torch/nn/modules" not in frame.f_code.co_filename:
            site = f"{type(self_obj).__name__}.{frame.f_code.co_name}"
            line = f"{frame.f_code.co_filename}:{lineno}: {source_line(frame)}"
    return site, line


def _defaulted_arguments(model: torch.nn.Module, n_given: int) -> Dict[str, Any]:
    """forward's parameters beyond the `n_given` leading ones the batches give (positionally, or by
    name: data.py orders a dict batch by the parameters), at their defaults (traced as constants); a
    parameter with no default that the data does not fill is refused by name."""
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for p in params[n_given:]:
        if p.default is inspect.Parameter.empty:
            keyword_only = p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            raise CaptureError(
                f"{type(model).__name__}.forward takes {'keyword-only ' if keyword_only else ''}argument "
                f"'{p.name}' with no default, which the representative batches do not give: give it a default, "
                f"yield each batch as a dict naming every input ({{'{params[0].name}': ..., '{p.name}': ...}}), or "
                "wrap the model in a module whose forward takes only tensors")
    return {p.name: p.default for p in params[n_given:]}


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


class _ThisThreadOnly:
    """sys.stderr for the time of a capture: this thread's writes go to `buffer`, other threads' to the stream
    they would have gone to (sys.stderr is process-wide)."""

    def __init__(self, stream: Any, buffer: io.StringIO):
        self._stream, self._buffer, self._thread = stream, buffer, threading.get_ident()

    def write(self, text: str) -> int:
        return (self._buffer if threading.get_ident() == self._thread else self._stream).write(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding...: the real stream's
        return getattr(self._stream, name)


def _quiet_export(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], name: str) -> Graph:
    """capture_with_export, without the partial graphs torch.export prints to stderr when it fails (hundreds
    of lines for a model the next route captures); anything else written to stderr meanwhile is passed on,
    unless the route failed: then what torch printed on the way (tracebacks of its own shape checks) is about
    a route not taken, and the capture's error names each route's failure."""
    buffer = io.StringIO()
    failed = True
    try:
        with contextlib.redirect_stderr(_ThisThreadOnly(sys.stderr, buffer)):
            captured = capture_with_export(model, example_inputs, name)
        failed = False
        return captured
    finally:
        if failed:
            buffer = io.StringIO()
        kept, in_graph = [], False
        for text_line in buffer.getvalue().splitlines(keepends=True):
            if text_line.startswith("def forward("):  # a printed graph: its indented body and blank lines follow
                in_graph = True
                while kept and not kept[-1].strip():
                    kept.pop()
                continue
            if in_graph and (not text_line.strip() or text_line[0] in " \t"):
                continue
            in_graph = False
            kept.append(text_line)
        if "".join(kept).strip():
            sys.stderr.write("".join(kept))


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def _all_routes_failed(name: str, fx_error: BaseException, site: str, line: str, export_error: BaseException,
                       trace_error: BaseException) -> str:
    """Where and why each capture route failed, and what to change (the real-input trace's advice when it
    met a construct it refuses: it is the route that gets furthest)."""
    if isinstance(trace_error, ConcreteTraceError):
        trace_text = "\n    ".join(str(trace_error).splitlines())
        advice = trace_error.advice
    else:
        trace_text = _first_line(trace_error)
        advice = ("make the forward run on the representative inputs (the tracing route runs it as it is), or "
                  "replace Python control flow on tensor values (if/for/while on a tensor) with tensor operations "
                  "(torch.where, masking)")
    return (f"cannot capture {name}:\n  torch.fx failed in {site}: {_first_line(fx_error)}"
            + (f"\n    at {line}" if line else "")
            + f"\n  torch.export failed: {_first_line(export_error)}"
            + f"\n  tracing with the representative inputs failed: {trace_text}"
            + f"\nWhat to do: {advice}.")


def _run_failure_hint(example_inputs: Sequence[Any]) -> str:
    for k, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex()):
            return (f"\nInput {k} is {x.dtype}: if it is an image, a signal or features, give float32 tensors "
                    "(e.g. x.float() / 255); integer inputs are for token ids and indices")
    return ""


class _ThisThreadTracer(fx.Tracer):
    """torch.fx's tracer, blind to other threads: while it traces, torch.nn.Module.__call__ and
    __getattr__ are patched process-wide, and a model another thread runs would be recorded into this
    trace (or fail: "module is not installed as a submodule"); its calls pass through unchanged."""

    def __init__(self):
        super().__init__()
        self._thread = threading.get_ident()

    def call_module(self, m, forward, args, kwargs):
        if threading.get_ident() != self._thread:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return is_custom_layer(m) or super().is_leaf_module(m, module_qualified_name)  # Sony's NMS layers: whole

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        if threading.get_ident() != self._thread:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)


def _drop_dead_layers(gm: fx.GraphModule, name: str) -> None:
    """Remove what no output reads (a head computed twice, with one result thrown away, as Ultralytics'
    pose and segmentation heads are under its IMX export): it would be quantized, counted in the weights
    memory and given bits for nothing."""
    calls = [(n.name, n.target) for n in gm.graph.nodes if n.op == "call_module"]
    if not gm.graph.eliminate_dead_code():
        return
    gm.recompile()
    kept = {n.name for n in gm.graph.nodes}
    dropped = [str(target) for node_name, target in calls if node_name not in kept]
    if dropped:
        logger.info(f"{name}: {len(dropped)} layer call(s) whose results no output reads were left out of the "
                    f"quantized model: {', '.join(dropped[:8])}{' ...' if len(dropped) > 8 else ''}")


def capture(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> Graph:
    """The core graph of `model` (not modified: a copy is traced), with shapes from `example_inputs`."""
    model = copy.deepcopy(model).eval()
    name = type(model).__name__
    concrete = _defaulted_arguments(model, len(example_inputs))
    try:
        with FRAMEWORK_STATE.exclusive:  # fx patches torch process-wide: alone (concurrency.py), blind to other threads
            tracer = _ThisThreadTracer()
            traced = tracer.trace(model, concrete_args=concrete or None)
        gm = fx.GraphModule(tracer.root, traced, name)
        if concrete:
            _drop_specialised_inputs(gm, len(example_inputs))
    except Exception as fx_error:  # noqa: BLE001 - any tracing failure leads to the fallbacks
        site, line = _failure_site(fx_error)
        try:
            with FRAMEWORK_STATE.exclusive:  # (torch.export switches process-wide settings: concurrency.py)
                return _quiet_export(model, example_inputs, name)
        except Exception as export_error:  # noqa: BLE001
            try:  # (thread-local mode, wrappers on this copy only: no lock needed)
                return capture_with_concrete_trace(model, example_inputs, name)
            except Exception as trace_error:  # noqa: BLE001
                raise CaptureError(_all_routes_failed(name, fx_error, site, line, export_error, trace_error)
                                   ) from trace_error
    functional_calls_to_layers(gm)
    functionalize_in_place_ops(gm)
    _drop_dead_layers(gm, name)
    try:
        with torch.no_grad():  # shapes from a couple of samples: the traced graph does not depend on the batch size
            ShapeProp(gm).propagate(*[x[:2] if isinstance(x, torch.Tensor) and x.dim() > 0 else x
                                      for x in example_inputs])
    except Exception as e:  # noqa: BLE001
        cause = e.__cause__ or e  # ShapeProp wraps the model's own error in a long node dump
        raise CaptureError(f"{name} failed to run on the representative inputs (shapes "
                           f"{[tuple(x.shape) for x in example_inputs]}, dtypes "
                           f"{[str(x.dtype).removeprefix('torch.') for x in example_inputs]}): "
                           f"{_first_line(cause)}" + _run_failure_hint(example_inputs)) from e
    return graph_from_fx(gm, name)
