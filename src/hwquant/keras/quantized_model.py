"""The quantized Keras model: the core graph built with a KerasQuantizationWrapper around each layer
whose weights are quantized (the inner layer holding the quantized weights) and a
KerasActivationQuantizationHolder, named `<node>_activation_holder_quantizer` as MCT names them,
after each quantized activation."""
from __future__ import annotations

from typing import Any, Dict, Sequence

import keras
import numpy as np

from hwquant.core.graph.model_graph import Graph, Node, NodeKind
from hwquant.keras.builder import build_model
from hwquant.keras.quantizers import (KerasActivationQuantizationHolder, KerasInferableQuantizer,
                                      KerasQuantizationWrapper, make_quantizer)

HOLDER_SUFFIX = "_activation_holder_quantizer"


def weight_quantizers(node: Node) -> Dict[str, KerasInferableQuantizer]:
    cfg = node.final_config
    if cfg is None or node.kind != NodeKind.MODULE:
        return {}
    out = {}
    for attr, wc in cfg.weights_quantization_cfg.attrs.items():
        if wc.enable_weights_quantization and attr in node.weights:
            axis = wc.weights_channels_axis if wc.weights_per_channel_threshold else None
            out[attr] = make_quantizer(wc.weights_quantization_method, wc.weights_n_bits,
                                       wc.weights_quantization_params, channel_axis=axis, target="weights")
    return out


class QuantizationBlocks:
    """The wrappers and holders a quantized build puts in (subclassed by the mixed-precision model)."""

    def __init__(self):
        self._weight_quantizers: Dict[str, Dict[str, KerasInferableQuantizer]] = {}  # by node, made in wrap()

    def wrap(self, node: Node, layer: Any) -> Any:
        quantizers = self._weight_quantizers[node.name] = weight_quantizers(node)
        return KerasQuantizationWrapper(layer, quantizers, name=f"quant_{node.name}") if quantizers else layer

    def weights(self, node: Node) -> Dict[Any, Any]:
        return quantized_weights(node, self._weight_quantizers[node.name])

    def after(self, node: Node, tensor: Any) -> Any:
        quantizer = activation_quantizer(node)
        if quantizer is None:
            return tensor
        return KerasActivationQuantizationHolder(quantizer, name=f"{node.name}{HOLDER_SUFFIX}")(tensor)


def quantized_weights(node: Node, quantizers: Dict[str, KerasInferableQuantizer]) -> Dict[Any, Any]:
    """The node's weights, those with a quantizer quantized (the values the wrapped layer holds)."""
    out = dict(node.weights)
    for attr, q in quantizers.items():
        out[attr] = np.asarray(keras.ops.convert_to_numpy(q(np.asarray(node.weights[attr], np.float32))), np.float32)
    return out


def activation_quantizer(node: Node) -> Any:
    """The quantizer of the node's output under its final config (None when not quantized)."""
    cfg = node.final_config
    if cfg is None or not cfg.activation_quantization_cfg.quantized:
        return None
    a = cfg.activation_quantization_cfg
    return make_quantizer(a.activation_quantization_method, a.activation_n_bits, a.activation_quantization_params)


def build_quantized_model(graph: Graph, extra_outputs: Sequence[str] = (), blocks: Any = None) -> Any:
    return build_model(graph, extra_outputs, blocks=blocks or QuantizationBlocks())


class NodeRunner:
    """The quantized model of a graph run one node at a time, eagerly (core/passes/output_mean_correction.py's
    primitive): each layer built on first use (as build_model builds it), rebuilt by ``refresh``."""

    def __init__(self, graph: Graph):
        self.graph, self.blocks = graph, QuantizationBlocks()
        self.layers: Dict[str, Any] = {}
        self.activations: Dict[str, Any] = {}

    def feed(self, value: Any) -> Any:
        return keras.ops.convert_to_tensor(value)

    def refresh(self, node: Node) -> None:
        self.layers.pop(node.name, None)

    def run(self, node: Node, args: Sequence[Any], kwargs: Dict[str, Any]) -> tuple:
        from hwquant.keras.builder import new_layer, set_layer_weights

        if node.kind == NodeKind.INPUT:
            out = args[0]
        elif node.call_target == "getitem":
            out = args[0][args[1]]
        elif node.kind == NodeKind.MODULE:
            built = node.name in self.layers
            if not built:
                layer = new_layer(node)
                self.layers[node.name] = (layer, self.blocks.wrap(node, layer))
            layer, called = self.layers[node.name]
            out = called(*args, **kwargs)
            if not built and node.weights:
                set_layer_weights(layer, self.blocks.weights(node))
                out = called(*args, **kwargs)  # (the first call built the layer with initial weights)
        else:
            out = node.call_target(*args, **kwargs)
        if node.name not in self.activations:
            self.activations[node.name] = activation_quantizer(node)
        quantizer = self.activations[node.name]
        return out, out if quantizer is None else quantizer(out)

    def channel_mean(self, value: Any, node: Node) -> np.ndarray:
        t = np.asarray(keras.ops.convert_to_numpy(value), np.float64)
        return t.reshape(-1, t.shape[-1]).mean(0) if t.ndim > 1 else t.mean().reshape(1)
