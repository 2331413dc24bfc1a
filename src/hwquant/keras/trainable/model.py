"""A quantized Keras model whose quantizers train (QAT, GPTQ), and its conversion back to an inferable
model.

The trainable model is the PTQ model's graph built with trainable quantizers in place of the fixed ones:
the kernel of every quantized layer gets a trainable weight quantizer (the wrapped layer then holds the
float kernel; other weights keep their fixed quantizers, as in MCT) and every quantized activation a
trainable activation quantizer. It is a plain functional ``keras.Model``: ``compile`` / ``fit``, a custom
training step, ``save`` / ``load_model`` all work as for any model.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np

from hwquant.core.graph.model_graph import Graph, Node
from hwquant.errors import InvalidConfigError
from hwquant.keras.builder import build_model
from hwquant.keras.quantized_model import HOLDER_SUFFIX, QuantizationBlocks, activation_quantizer, quantized_weights
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper
from hwquant.keras.trainable.base import BaseKerasTrainableQuantizer
from hwquant.trainable_infrastructure.common import no_trainable_quantizers


class TrainableBlocks(QuantizationBlocks):
    """Quantization blocks of a trainable model: ``make_weights(node, attr)`` for each quantized kernel,
    ``make_activation(node)`` for each quantized activation, fixed quantizers elsewhere."""

    def __init__(self, kernel_attr: Callable[[Node], Optional[str]],
                 make_weights: Callable[[Node, str], BaseKerasTrainableQuantizer],
                 make_activation: Callable[[Node], BaseKerasTrainableQuantizer]):
        super().__init__()
        self._kernel_attr, self._make_weights, self._make_activation = kernel_attr, make_weights, make_activation

    def wrap(self, node: Node, layer: Any) -> Any:
        wrapper = super().wrap(node, layer)
        attr = self._kernel_attr(node)
        quantizers = self._weight_quantizers[node.name]
        if attr in quantizers:
            quantizers[attr] = wrapper.weights_quantizers[attr] = self._make_weights(node, attr)
        return wrapper

    def weights(self, node: Node) -> Dict[Any, Any]:
        # the float kernel for a trainable quantizer (it quantizes at each call), quantized weights otherwise
        fixed = {k: q for k, q in self._weight_quantizers[node.name].items() if not isinstance(q, BaseKerasTrainableQuantizer)}
        return quantized_weights(node, fixed)

    def after(self, node: Node, tensor: Any) -> Any:
        if activation_quantizer(node) is None:
            return tensor
        return KerasActivationQuantizationHolder(self._make_activation(node), name=f"{node.name}{HOLDER_SUFFIX}")(tensor)


def build_trainable_model(graph: Graph, blocks: TrainableBlocks, extra_outputs: Sequence[str] = ()) -> Any:
    """The trainable functional model of a quantized graph (every layer weight trainable)."""
    return build_model(graph, extra_outputs, blocks=blocks)


def trainable_quantizers(model: Any) -> List[Tuple[Any, Optional[str], BaseKerasTrainableQuantizer]]:
    """(the wrapper or holder holding it, weight name or None, quantizer) for every trainable quantizer."""
    found = []
    for layer in getattr(model, "layers", []):
        if isinstance(layer, KerasQuantizationWrapper):
            found += [(layer, k, q) for k, q in layer.weights_quantizers.items() if isinstance(q, BaseKerasTrainableQuantizer)]
        elif isinstance(layer, KerasActivationQuantizationHolder) and \
                isinstance(layer.activation_holder_quantizer, BaseKerasTrainableQuantizer):
            found.append((layer, None, layer.activation_holder_quantizer))
    return found


def _check_finite(model: Any) -> None:
    diverged = sorted({v.path.rsplit("/", 1)[0] for v in model.weights
                       if not np.isfinite(np.asarray(keras.ops.convert_to_numpy(v.value), np.float64)).all()})
    if diverged:  # a NaN weight makes every output NaN: say so instead of returning that model
        raise InvalidConfigError(f"training diverged: variables of {', '.join(diverged[:8])}"
                                 f"{' and more' if len(diverged) > 8 else ''} hold NaN or infinite values; the model is "
                                 "left as it is. Train again with a lower learning rate (or gradient clipping) from "
                                 "the QAT init model")


def convert_to_inferable(model: Any) -> Any:
    """A new model with every trainable quantizer of ``model`` replaced by its inferable conversion and
    each trained kernel quantized into its layer: bitwise the trained model's inference outputs.
    ``model`` is left as it is; every conversion is made before the new model, so a failure changes nothing."""
    if not isinstance(model, keras.Model):
        raise InvalidConfigError(f"expected the keras.Model returned by the QAT / GPTQ init, got {type(model).__name__}")
    found = trainable_quantizers(model)
    if not found:
        quantized = any(isinstance(layer, (KerasQuantizationWrapper, KerasActivationQuantizationHolder))
                        for layer in getattr(model, "layers", []))
        method = (getattr(model, "hwquant_metadata", None) or {}).get("method")
        raise InvalidConfigError(no_trainable_quantizers(quantized, method, "keras"))
    _check_finite(model)
    converted: Dict[Tuple[str, Optional[str]], Any] = {}
    kernels: Dict[str, Dict[str, np.ndarray]] = {}
    for owner, attr, q in found:
        try:
            converted[owner.name, attr] = q.convert_to_inferable_quantizers()
        except ValueError as e:
            raise InvalidConfigError(f"cannot convert the quantizer of '{owner.name}': {e}") from e
        if attr is not None:  # the trained kernel, quantized as the trained model's inference quantizes it
            weight = owner._layer_weights()[attr]
            kernels.setdefault(owner.name, {})[attr] = np.asarray(keras.ops.convert_to_numpy(q(weight.value, training=False)))

    def clone(layer: Any) -> Any:
        if isinstance(layer, KerasQuantizationWrapper):
            inner = type(layer.layer).from_config(layer.layer.get_config())
            quantizers = {k: converted.get((layer.name, k), q) for k, q in layer.weights_quantizers.items()}
            return KerasQuantizationWrapper(inner, quantizers, name=layer.name)
        if isinstance(layer, KerasActivationQuantizationHolder):
            return KerasActivationQuantizationHolder(converted.get((layer.name, None), layer.activation_holder_quantizer),
                                                     name=layer.name)
        return type(layer).from_config(layer.get_config())

    inferable = keras.models.clone_model(model, clone_function=clone)
    for old, new in zip(model.layers, inferable.layers):
        if isinstance(old, KerasQuantizationWrapper):
            values = {k: kernels.get(old.name, {}).get(k, np.asarray(keras.ops.convert_to_numpy(w.value)))
                      for k, w in old._layer_weights().items()}
            new.layer.set_weights([values[k] for k in new._layer_weights()])
        elif not isinstance(old, KerasActivationQuantizationHolder):
            new.set_weights(old.get_weights())
    return inferable
