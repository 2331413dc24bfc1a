"""Build a PyTorch module back from the core graph: the float model (for statistics), the model
with extra outputs (to observe intermediate tensors), and the quantized model.

The result is a `torch.fx.GraphModule`: a plain `nn.Module` that prints its code, saves and loads
through its state dict, moves across devices and exports like any traced model.
"""
from __future__ import annotations

import copy
import operator
import re
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import torch
import torch.fx as fx
import torch.nn.functional as F
from mct_quantizers.common.constants import ACTIVATION_HOLDER_QUANTIZER
from torch import nn

from hwquant.core.graph.model_graph import Graph, Node, NodeKind, map_input_refs, map_structure, unique_name
from hwquant.core.numerics.integer_accumulation import input_grid
from hwquant.torch.quantizers import (InferableQuantizer, PytorchActivationQuantizationHolder,
                                      PytorchQuantizationWrapper, make_inferable_quantizer)


def _attr_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


# torch layers, functions and tensor methods that only move values (see core.numerics.integer_accumulation).
_MOVING_LAYERS = (nn.Flatten, nn.Unflatten, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.Dropout, nn.Identity)
_MOVING_FUNCTIONS = {torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze, torch.transpose, torch.permute,
                     F.max_pool1d, F.max_pool2d, F.max_pool3d, F.dropout}
_MOVING_METHODS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "contiguous"}


def _moves_values(node: Node) -> bool:
    if node.kind == NodeKind.MODULE:
        return isinstance(node.call_target, _MOVING_LAYERS)
    if node.kind == NodeKind.FUNCTION:
        return node.call_target in _MOVING_FUNCTIONS
    return node.kind == NodeKind.METHOD and node.call_target in _MOVING_METHODS


def make_layer(node: Node) -> nn.Module:
    """A copy of the node's layer carrying the node's (possibly folded) weights."""
    layer = copy.deepcopy(node.call_target)
    for name, value in node.weights.items():
        # a copy, never a view of the graph's array: a model trained in place (GPTQ's biases) would
        # otherwise change the graph and every other model built from it (the float teacher)
        tensor = torch.tensor(np.ascontiguousarray(value))
        current = getattr(layer, name, None)
        if isinstance(current, nn.Parameter) or (current is None and name in ("weight", "bias")):
            setattr(layer, name, nn.Parameter(tensor.to(torch.float32), requires_grad=False))
        elif isinstance(current, torch.Tensor):
            setattr(layer, name, tensor.to(current.dtype))
    return layer


class QuantizerFactory:
    """Makes the quantizer modules of a node (the torch side of the node's final config)."""

    def weights(self, node: Node, cfg: Any = None) -> Dict[str, InferableQuantizer]:
        """The node's weight quantizers under `cfg` (default: its final config)."""
        cfg = cfg or node.final_config
        if cfg is None or node.kind != NodeKind.MODULE:
            return {}
        out = {}
        for attr, wc in cfg.weights_quantization_cfg.attrs.items():
            if wc.enable_weights_quantization and isinstance(attr, str) and attr in node.weights:
                axis = wc.weights_channels_axis if wc.weights_per_channel_threshold else None
                out[attr] = make_inferable_quantizer(wc.weights_quantization_method, wc.weights_n_bits,
                                                     wc.weights_quantization_params, channel_axis=axis,
                                                     target="weights", input_rank=np.ndim(node.weights[attr]))
        return out

    def input_scale(self, graph: Graph, node: Node) -> Optional[float]:
        """Scale of the grid the node's input lies on (None: unknown), for the integer-kernel path."""
        grid = input_grid(graph, node, _moves_values)
        return None if grid is None else float(grid.scale)

    @staticmethod
    def quantized_activation(node: Node, cfg: Any = None) -> Any:
        """The node's activation config under `cfg` (default: its final config) if it is quantized, else None."""
        cfg = cfg or node.final_config
        return cfg.activation_quantization_cfg if cfg is not None and cfg.activation_quantization_cfg.quantized else None

    def activation(self, node: Node, cfg: Any = None) -> Optional[InferableQuantizer]:
        ac = self.quantized_activation(node, cfg)
        if ac is None:
            return None
        return make_inferable_quantizer(ac.activation_quantization_method, ac.activation_n_bits,
                                        ac.activation_quantization_params, target="activation")


class FakeQuantizers(QuantizerFactory):
    """The quantized model on the float path (fake-quantized kernels): the integer-kernel simulation gives
    the same outputs up to float rounding, several times slower on a CPU (the judges' and measurements' model)."""

    def input_scale(self, graph: Graph, node: Node) -> None:
        return None


class NodeRunner:
    """The fake-quantized model of a graph run one node at a time (core/passes/output_mean_correction.py's
    primitive): layers built on first use, rebuilt by ``refresh``."""

    def __init__(self, graph: Graph, device: Any):
        self.graph, self.device, self.quantizers = graph, device, FakeQuantizers()
        self.layers: Dict[str, nn.Module] = {}
        self.holders: Dict[str, Optional[nn.Module]] = {}

    def feed(self, value: Any) -> torch.Tensor:
        return torch.as_tensor(value).to(self.device)

    def refresh(self, node: Node) -> None:
        self.layers.pop(node.name, None)

    @torch.no_grad()
    def run(self, node: Node, args: Sequence[Any], kwargs: Dict[str, Any]) -> tuple:
        if node.kind == NodeKind.INPUT:
            out = args[0]
        elif node.kind == NodeKind.CONSTANT:
            out = torch.as_tensor(np.ascontiguousarray(node.weights[0])).to(self.device)
        elif node.kind == NodeKind.MODULE:
            if node.name not in self.layers:
                self.layers[node.name] = build_layer(self.graph, node, self.quantizers).to(self.device).eval()
            out = self.layers[node.name](*args, **kwargs)
        elif node.kind == NodeKind.METHOD:
            out = getattr(args[0], node.call_target)(*args[1:], **kwargs)
        else:
            out = node.call_target(*args, **kwargs)
        if node.name not in self.holders:
            aq = self.quantizers.activation(node)
            self.holders[node.name] = None if aq is None else PytorchActivationQuantizationHolder(aq).to(self.device)
        holder = self.holders[node.name]
        return out, out if holder is None else holder(out)

    def channel_mean(self, value: torch.Tensor, node: Node) -> np.ndarray:
        axis = -1 if isinstance(node.call_target, nn.Linear) else 1
        t = value.detach().double()
        t = t.movedim(axis, 0).reshape(t.shape[axis], -1).mean(1) if t.dim() > 1 else t.mean().reshape(1)
        return t.cpu().numpy()


def build_layer(graph: Graph, node: Node, quantizers: Optional["QuantizerFactory"] = None) -> nn.Module:
    """The module of a MODULE node: its layer with the node's weights, wrapped with its weight
    quantizers when ``quantizers`` are given."""
    layer = make_layer(node)
    wq = quantizers.weights(node) if quantizers else {}
    if wq:
        layer = PytorchQuantizationWrapper(layer, wq, quantizers.input_scale(graph, node))
    return layer


def _guard_sizes(g: fx.Graph, placeholder: fx.Node, node: Node) -> None:
    """Checks that an input has sizes the capture allowed (torch.export specialised the model on
    them, or the real-input trace recorded constants for them): called outside them, the quantized
    model says so instead of silently running the branch or constants it was captured with. The
    capture may say why (`size_reason`); the default is torch.export's."""
    reason = node.framework_attr.get("size_reason") or (
        "the model was captured through torch.export, which assumed that because the model's forward depends on it "
        "(a branch on a size, a hard-coded shape); call it within that, or write the forward with tensor operations "
        "so that torch.fx can capture it")
    for dim, (lo, hi) in sorted(node.framework_attr.get("size_ranges", {}).items()):
        actual = g.call_method("size", (placeholder, dim))
        for op, bound, words in ((operator.eq, lo, "exactly"), (operator.ge, lo, "at least"), (operator.le, hi, "at most")):
            if bound is None or (op is operator.eq) != (lo == hi):  # exactly, or at least / at most
                continue
            g.call_function(torch._assert, (g.call_function(op, (actual, bound)),
                                            f"input '{node.name}' must have {words} {bound} in dimension {dim}: {reason}"))


class _Observer(nn.Module):
    """Hands one observed tensor to the observer (build_module's `observer`); returns nothing."""

    def __init__(self, index: int, observer: Callable[[int, torch.Tensor], None]):
        super().__init__()
        self.index = index
        self.__dict__["observer"] = observer  # a function, not a submodule

    def forward(self, tensor: torch.Tensor) -> None:
        self.observer(self.index, tensor)


def build_module(graph: Graph, quantizers: Optional[QuantizerFactory] = None,
                 extra_outputs: Optional[Sequence[str]] = None, class_name: Optional[str] = None,
                 extra_outputs_unquantized: bool = False,
                 observer: Optional[Callable[[int, torch.Tensor], None]] = None) -> fx.GraphModule:
    """The model of `graph`. With `quantizers`, weights are wrapped with their quantizers and every
    quantized activation passes through a holder. With `extra_outputs`, the module returns
    `(model outputs, [tensors of those nodes])` (statistics collection), taken after the nodes'
    activation quantizers, or before them with `extra_outputs_unquantized` (GPTQ's interest points).
    With `observer` as well, the module returns the model outputs only and calls `observer(i, tensor)` as
    soon as `extra_outputs[i]` is computed, so that each tensor is freed after its last use instead of
    all being held to the end (a batch of a large model's activations is gigabytes).
    No later operation can overwrite an observed tensor: capture made the graph functional
    (``fx_graph.functionalize_in_place_ops``)."""
    root = nn.Module()
    g = fx.Graph()
    env: Dict[str, fx.Node] = {}
    used_names: set = set()
    placed: Dict[str, Dict[str, str]] = {}  # graph node -> {"layer": module name, "holder": module name}
    unquantized: Dict[str, fx.Node] = {}
    observed = {name: i for i, name in enumerate(extra_outputs or ())}

    def register(base: str, module: nn.Module) -> str:
        name = unique_name(_attr_name(base), used_names)
        used_names.add(name)
        root.add_module(name, module)
        return name

    for node in graph:
        # map_input_refs calls the function at once, so the loop variable cannot go stale
        args = map_input_refs(node.call_args, lambda r: env[node.inputs[r.index]])  # noqa: B023
        kwargs = map_input_refs(node.call_kwargs, lambda r: env[node.inputs[r.index]])  # noqa: B023
        if node.kind == NodeKind.INPUT:
            out = g.placeholder(_attr_name(node.name))
            _guard_sizes(g, out, node)
        elif node.kind == NodeKind.CONSTANT:
            name = _attr_name(node.name)
            root.register_buffer(name, torch.as_tensor(np.ascontiguousarray(node.weights[0])))
            used_names.add(name)
            out = g.get_attr(name)
        elif node.kind == NodeKind.MODULE:
            layer = build_layer(graph, node, quantizers)
            placed.setdefault(node.name, {})["layer"] = register(node.name, layer)
            out = g.call_module(placed[node.name]["layer"], args, kwargs)
        elif node.kind == NodeKind.FUNCTION:
            out = g.call_function(node.call_target, args, kwargs)
        elif node.kind == NodeKind.METHOD:
            out = g.call_method(node.call_target, args, kwargs)
        else:
            raise ValueError(f"node '{node.name}' has unknown kind {node.kind!r}")
        unquantized[node.name] = out
        aq = quantizers.activation(node) if quantizers else None
        if aq is not None:
            # mct-quantizers' name for a node's holder
            placed.setdefault(node.name, {})["holder"] = register(f"{node.name}_{ACTIVATION_HOLDER_QUANTIZER}",
                                                                  PytorchActivationQuantizationHolder(aq))
            out = g.call_module(placed[node.name]["holder"], (out,))
        env[node.name] = out
        if observer is not None and node.name in observed:
            watched = unquantized[node.name] if extra_outputs_unquantized else out
            g.call_module(register(f"{node.name}_observer", _Observer(observed[node.name], observer)), (watched,))

    result = map_structure(graph.outputs, env.__getitem__)
    if extra_outputs is not None and observer is None:
        result = (result, [(unquantized if extra_outputs_unquantized else env)[n] for n in extra_outputs])
    g.output(result)
    module = fx.GraphModule(root, g, class_name=class_name or (f"{graph.name}Quantized" if quantizers else graph.name))
    module.meta["hwquant_placement"] = placed  # where each graph node's layer / activation holder went
    if quantizers:  # what MCT's quantized model offers: node name -> the name of its holder
        module.node_to_activation_quantization_holder = {n: p["holder"] for n, p in placed.items() if "holder" in p}
    return module
