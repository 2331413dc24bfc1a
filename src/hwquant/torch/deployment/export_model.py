"""The PyTorch side of export: find the toolkit's quantizers in a model, trace it to ONNX with each
quantizer written as one marker node (lowered afterwards by ``exporter.onnx_lowering``), or trace
it to TorchScript as it is (fake quantization in plain torch ops)."""
from __future__ import annotations

import copy
import io
import warnings
import weakref
from typing import Dict, List, Optional, Sequence

import onnx
import torch
from torch import nn

from hwquant.concurrency import FRAMEWORK_STATE
from hwquant.errors import ExportError
from hwquant.exporter.quantizer_spec import MARKER_DOMAIN, MARKER_OP, QuantizerSpec
from hwquant.torch.deployment.imx500_forms import rewrite_for_imx500
from hwquant.torch.quantizers import InferableQuantizer, quantizer_slots, set_quantizer


def quantizers_of(model: nn.Module) -> Dict[str, InferableQuantizer]:
    """The toolkit's inferable quantizers of ``model`` by where they sit."""
    return {f"{path}.weights_quantizers.{w}" if w is not None else f"{path}.activation_holder_quantizer": q
            for path, _, w, q in quantizer_slots(model) if isinstance(q, InferableQuantizer)}


def spec_of(q: InferableQuantizer) -> QuantizerSpec:
    return QuantizerSpec(q.target, q.method, q.num_bits, dict(q.params), q.channel_axis)


# Quantizers by id while a model is being traced: an autograd Function's arguments must be tensors
# or plain values, and ops run inside its forward are not traced (only its symbolic is exported).
_TRACED_QUANTIZERS: "weakref.WeakValueDictionary[int, InferableQuantizer]" = weakref.WeakValueDictionary()


class _MarkerFunction(torch.autograd.Function):
    """Runs the quantizer; in ONNX it is one marker node carrying the quantizer's spec."""

    @staticmethod
    def forward(ctx, x, key, spec_json):
        return _TRACED_QUANTIZERS[key].forward(x)  # not __call__: the tracer tracks module calls

    @staticmethod
    def symbolic(g, x, key, spec_json):
        return g.op(f"{MARKER_DOMAIN}::{MARKER_OP}", x, spec_s=spec_json).setType(x.type())


class _MarkedQuantizer(nn.Module):
    def __init__(self, quantizer: InferableQuantizer):
        super().__init__()
        # Not a submodule: what it reads happens inside the Function, out of the tracer's sight.
        self.__dict__["quantizer"] = quantizer
        self.spec_json = spec_of(quantizer).to_json()
        _TRACED_QUANTIZERS[id(quantizer)] = quantizer

    def forward(self, x):
        return _MarkerFunction.apply(x, id(self.quantizer), self.spec_json)


def _traced_sizes(model: nn.Module) -> None:
    """A torch.export capture reads sizes with ``aten.sym_size``, which the ONNX tracer sees as plain
    integers: the traced batch would be baked into every reshape of a file that declares a dynamic
    batch. As ``x.size(d)`` and tensor-method reshapes the tracer records them as Shape operators.
    Every captured graph in `model` is rewritten: the model itself, or one held by a caller's wrapper."""
    methods = {torch.ops.aten.sym_size.int: "size", torch.ops.aten.reshape.default: "reshape",
               torch.ops.aten.view.default: "view", torch.ops.aten.expand.default: "expand"}
    for graph_module in (m for m in model.modules() if isinstance(m, torch.fx.GraphModule)):
        changed = False
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target in methods:
                node.op, node.target, changed = "call_method", methods[node.target], True
        if changed:
            graph_module.recompile()


def is_pytorch_layer_exportable(layer: nn.Module) -> bool:
    """MCT's check of one top-level layer before export: a quantization wrapper holds a non-empty dict of
    inferable weight quantizers, an activation holder an inferable quantizer; other modules export as
    they are."""
    from mct_quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper
    from mct_quantizers.pytorch.quantizers import BasePyTorchInferableQuantizer

    if isinstance(layer, PytorchQuantizationWrapper):
        quantizers = layer.weights_quantizers
        return (isinstance(quantizers, dict) and len(quantizers) > 0
                and all(isinstance(q, BasePyTorchInferableQuantizer) for q in quantizers.values()))
    if isinstance(layer, PytorchActivationQuantizationHolder):
        return isinstance(layer.activation_holder_quantizer, BasePyTorchInferableQuantizer)
    return isinstance(layer, nn.Module)


def to_onnx(model: nn.Module, example: Sequence[torch.Tensor], opset: int,
            imx500_forms: bool = False, output_names: Optional[List[str]] = None) -> onnx.ModelProto:
    """The model as ONNX with marker nodes, batch dimension dynamic on every input and output;
    with `imx500_forms`, in the layouts the IMX500 converter accepts (``torch.imx500_forms``).
    `output_names`: the graph's output names (default output_0, output_1, ...)."""
    with torch.no_grad():
        outputs = model(*example)
    export_copy = copy.deepcopy(model).eval()
    _traced_sizes(export_copy)
    if imx500_forms:
        rewrite_for_imx500(export_copy, example)
    for _, owner, weight, q in list(quantizer_slots(export_copy)):  # each quantizer replaced by its marker
        if isinstance(q, InferableQuantizer):
            set_quantizer(owner, weight, _MarkedQuantizer(q))
    n_out = len(torch.utils._pytree.tree_leaves(outputs))
    out_names = list(output_names) if output_names is not None else [f"output_{i}" for i in range(n_out)]
    if len(out_names) != n_out:
        raise ExportError(f"output_names has {len(out_names)} names ({out_names}) but the model has {n_out} "
                          "output(s); give one name per output")
    graph = getattr(model, "graph", None)
    inputs = [node.name for node in graph.nodes if node.op == "placeholder"] if graph is not None else []
    inputs = inputs if len(inputs) == len(example) else [f"input_{i}" for i in range(len(example))]
    buffer = io.BytesIO()
    # (torch.onnx keeps its exporting state in module globals: the export runs alone, concurrency.py)
    with FRAMEWORK_STATE.exclusive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        # torch.onnx.utils.export is the TorchScript exporter (whose custom-op symbolics write the quantizer
        # markers) on every torch 2.x; torch.onnx.export is not: its default became the torch.export-based
        # exporter in 2.9, and callers wrap it (Ultralytics adds dynamo=False to every call)
        torch.onnx.utils.export(export_copy, tuple(example), buffer, opset_version=opset,
                                input_names=inputs, output_names=out_names, do_constant_folding=True,
                                dynamic_axes={n: {0: "batch"} for n in inputs + out_names})
    return onnx.load_from_string(buffer.getvalue())


def to_torchscript(model: nn.Module, example: Sequence[torch.Tensor], extra_files: Dict[str, str]) -> bytes:
    with FRAMEWORK_STATE.exclusive, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated in favour of torch.export
        traced = torch.jit.trace(copy.deepcopy(model).eval(), tuple(example), check_trace=False)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(traced, buffer, _extra_files=extra_files)
    return buffer.getvalue()
