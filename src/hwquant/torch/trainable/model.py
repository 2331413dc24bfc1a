"""A quantized model whose quantizers train (QAT, and GPTQ next), and its conversion back to an
inferable model.

The trainable model is the PTQ model's graph built with trainable quantizers in place of the fixed
ones: the kernel of every quantized layer gets a trainable weight quantizer (other weight
attributes keep their fixed quantizers, as in MCT) and every quantized activation a trainable
activation quantizer. Layers run the float path while training (gradients) and, in eval mode, the
integer-kernel path reading the current grid of the activation holder upstream, so an evaluated
trainable model gives bitwise what the converted model gives.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx
from torch import nn

from hwquant.core.numerics import quant_math
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.numerics.integer_accumulation import input_grid_source
from hwquant.errors import InvalidConfigError
from hwquant.torch.builder import QuantizerFactory, _moves_values, build_module
from hwquant.torch.quantizers import PytorchQuantizationWrapper, _integer_kernel, quantizer_slots, set_quantizer
from hwquant.torch.trainable.base import BasePytorchTrainableQuantizer
from hwquant.trainable_infrastructure.common import no_trainable_quantizers


class TrainableQuantizerFactory(QuantizerFactory):
    """Quantizers of a trainable model: ``make_weights(node, attr)`` for each kernel,
    ``make_activation(node)`` for each quantized activation, fixed quantizers elsewhere."""

    def __init__(self, kernel_attr: Callable[[Node], Optional[str]],
                 make_weights: Callable[[Node, str], nn.Module], make_activation: Callable[[Node], nn.Module]):
        self._kernel_attr, self._make_weights, self._make_activation = kernel_attr, make_weights, make_activation

    def weights(self, node: Node, cfg=None):
        out = super().weights(node, cfg)
        attr = self._kernel_attr(node)
        if attr in out:
            quantizer = self._make_weights(node, attr)
            quantizer.initialize_quantization(tuple(node.weights[attr].shape), f"{node.name}.{attr}")
            out[attr] = quantizer
        return out

    def activation(self, node: Node, cfg=None):
        return self._make_activation(node) if self.quantized_activation(node, cfg) is not None else None

    def input_scale(self, graph: Graph, node: Node) -> None:
        return None  # the input grid learns: read from the holder upstream (set_input_holder)


def build_trainable_model(graph: Graph, factory: TrainableQuantizerFactory, device: torch.device,
                          extra_outputs: Optional[Sequence[str]] = None) -> fx.GraphModule:
    """The trainable model of a quantized graph, in training mode, every layer parameter trainable.
    With ``extra_outputs`` it also returns those nodes' outputs before their activation quantizers."""
    model = build_module(graph, factory, extra_outputs=extra_outputs, extra_outputs_unquantized=True)
    placement = model.meta["hwquant_placement"]
    for node in graph:
        layer = placement.get(node.name, {}).get("layer")
        wrapper = model.get_submodule(layer) if layer else None
        if isinstance(wrapper, PytorchQuantizationWrapper):
            source = input_grid_source(graph, node, _moves_values)
            holder = placement.get(source.name, {}).get("holder") if source is not None else None
            wrapper.set_input_holder(model.get_submodule(holder) if holder else None)
    quantizer_params = {id(p) for *_, q in trainable_quantizers(model) for p in q.parameters()}
    for p in model.parameters():
        if id(p) not in quantizer_params:
            p.requires_grad_(True)
    return model.to(device).train()


def trainable_quantizers(model: nn.Module) -> Iterator[Tuple[nn.Module, Optional[str], BasePytorchTrainableQuantizer]]:
    """(the wrapper or holder holding it, weight name or None, quantizer) for every trainable
    quantizer of ``model``."""
    for _, owner, weight, q in quantizer_slots(model):
        if isinstance(q, BasePytorchTrainableQuantizer):
            yield owner, weight, q


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy of ``model``, keeping the plain attributes torch.fx drops when it copies a
    GraphModule (node_to_activation_quantization_holder, a user's own)."""
    memo: Dict[int, Any] = {}
    result = copy.deepcopy(model, memo)
    for key, value in vars(model).items():
        if key not in vars(result):
            setattr(result, key, copy.deepcopy(value, memo))
    return result


def convert_to_inferable(model: nn.Module) -> nn.Module:
    """Replace every trainable quantizer of ``model`` by its inferable conversion, in place; layers
    whose input grid is now fixed take the integer-kernel path. Every conversion is made before the
    first replacement, so a failure leaves the model as it was."""
    if not isinstance(model, nn.Module):
        raise InvalidConfigError(f"expected the torch.nn.Module returned by the QAT / GPTQ init, got {type(model).__name__}")
    found = list(trainable_quantizers(model))
    if not found:
        from hwquant.torch.deployment.metadata import read_metadata

        method = (read_metadata(model) or {}).get("method")
        raise InvalidConfigError(no_trainable_quantizers(next(quantizer_slots(model), None) is not None, method, "pytorch"))
    names = {id(m): n for n, m in model.named_modules()}
    diverged = [name for name, t in list(model.named_parameters()) + list(model.named_buffers())
                if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if diverged:  # a NaN weight makes every output NaN: say so instead of returning that model
        layers = sorted({n.rsplit(".", 1)[0] for n in diverged})
        raise InvalidConfigError(f"training diverged: {len(diverged)} tensors hold NaN or infinite values, in "
                                 f"{', '.join(layers[:8])}{' and more' if len(layers) > 8 else ''}; the model is "
                                 "left as it is. Train again with a lower learning rate (or gradient clipping) "
                                 "from the QAT init model")
    converted: List[Tuple[nn.Module, Optional[str], Any]] = []
    for owner, weight, q in found:
        try:
            converted.append((owner, weight, q.convert_to_inferable_quantizers()))
        except ValueError as e:
            raise InvalidConfigError(f"cannot convert the quantizer of '{names.get(id(owner), '?')}': {e} "
                                     f"(did training diverge? its parameters are {[p.tolist() for p in q.parameters()]})") from e
    for owner, weight, inferable in converted:
        set_quantizer(owner, weight, inferable)
    for module in model.modules():
        if isinstance(module, PytorchQuantizationWrapper):
            holder = module.__dict__.get("_input_holder")
            module.set_input_holder(None)
            if holder is not None and _integer_kernel(module.layer, module.weights_quantizers) is not None:
                grid = holder.activation_holder_quantizer.grid()
                if isinstance(grid, quant_math.AffineGrid) and grid.axis is None:
                    module.input_scale = torch.tensor(float(grid.scale), device=module.weight.device)
    return model
