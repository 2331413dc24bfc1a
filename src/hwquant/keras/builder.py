"""Core graph -> Keras functional model. Every layer is made anew from its class, configuration and
weights (the user's model is never touched); raw operations are called as captured. The quantized
model is the same build with quantization blocks (quantized_model.py) put in."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence

from hwquant.core.graph.model_graph import Graph, Node, NodeKind, map_input_refs, map_structure


class Blocks(Protocol):
    """What a build adds for quantization: the layer to call (a wrapper around it), the weights the
    layer gets, and what follows a node's output (an activation holder)."""

    def wrap(self, node: Node, layer: Any) -> Any: ...

    def weights(self, node: Node) -> Dict[Any, Any]: ...

    def after(self, node: Node, tensor: Any) -> Any: ...


def weight_keys(layer: Any) -> List[str]:
    """The names a layer's weights go by in the graph node: the variable's name ('kernel', 'bias'), and
    for the second of two that share one (a Bidirectional layer's backward cell) 'kernel#1', in the
    layer's order (variable paths change when the layer is made anew)."""
    keys: List[str] = []
    for w in layer.weights:
        name = w.name.split("/")[-1].split(":")[0]
        seen = sum(k.split("#")[0] == name for k in keys)
        keys.append(f"{name}#{seen}" if seen else name)
    return keys


def new_layer(node: Node) -> Any:
    """A fresh layer of the node's class and configuration (weights set once it is built)."""
    config = dict(node.framework_attr)
    config["name"] = node.name
    if "use_bias" in config:  # a folded batch norm gives a kernel layer a bias it may not have had
        config["use_bias"] = "bias" in node.weights
    return node.type.from_config(config)


def set_layer_weights(layer: Any, weights: Dict[Any, Any]) -> None:
    """Assign weights by name to a built layer (every weight of the layer must be given)."""
    values = []
    for key in weight_keys(layer):
        if key not in weights:
            raise ValueError(f"layer '{layer.name}' has a weight '{key}' the graph node does not hold")
        values.append(weights[key])
    layer.set_weights(values)


def build_model(graph: Graph, extra_outputs: Sequence[str] = (), blocks: Optional[Blocks] = None,
                extra_outputs_unquantized: bool = False) -> Any:
    """The Keras functional model of `graph`, float unless `blocks` quantize it. ``extra_outputs``: node
    names whose tensors the model also returns, as ``(outputs, [extra tensors])``; with
    ``extra_outputs_unquantized``, those tensors before their activation quantizers (GPTQ's interest points)."""
    import keras

    tensors: Dict[str, Any] = {}
    unquantized: Dict[str, Any] = {}
    inputs = []
    for node in graph:
        if node.kind == NodeKind.INPUT:
            out = keras.Input(shape=tuple(node.output_shape[1:]), name=node.name)
            inputs.append(out)
        else:
            fill = lambda ref, n=node: tensors[n.inputs[ref.index]]  # noqa: E731
            args = map_input_refs(node.call_args, fill)
            kwargs = map_input_refs(node.call_kwargs, fill)
            if node.call_target == "getitem":
                out = args[0][args[1]]
            elif node.kind == NodeKind.MODULE:
                layer = new_layer(node)
                out = (blocks.wrap(node, layer) if blocks else layer)(*args, **kwargs)
                if node.weights:
                    set_layer_weights(layer, blocks.weights(node) if blocks else node.weights)
            else:
                out = node.call_target(*args, **kwargs)
        unquantized[node.name] = out
        tensors[node.name] = blocks.after(node, out) if blocks else out
    outputs = map_structure(graph.outputs, lambda name: tensors[name])
    if extra_outputs:
        outputs = (outputs, [(unquantized if extra_outputs_unquantized else tensors)[n] for n in extra_outputs])
    model = keras.Model(inputs if len(inputs) > 1 else inputs[0], outputs, name=graph.name)
    if keras.backend.backend() == "torch":  # (convolutions and pooling without Keras' layout copies)
        from hwquant.keras import torch_layers
        torch_layers.speed_up(model)
    return model
