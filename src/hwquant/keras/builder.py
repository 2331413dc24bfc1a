"""Core graph -> Keras functional model. Every layer is made anew from its class, configuration and
weights (the user's model is never touched); raw operations are called as captured."""
from __future__ import annotations

from typing import Any, Dict, Optional

from hwquant.core.graph import Graph, Node, NodeKind, map_input_refs, map_structure


def new_layer(node: Node, name: Optional[str] = None) -> Any:
    """A fresh layer of the node's class and configuration (weights set once it is built)."""
    config = dict(node.framework_attr)
    config["name"] = name or node.name
    return node.type.from_config(config)


def set_layer_weights(layer: Any, weights: Dict[Any, Any]) -> None:
    """Assign weights by name to a built layer (every weight of the layer must be given)."""
    values = []
    for w in layer.weights:
        key = w.name.split("/")[-1].split(":")[0]
        if key not in weights:
            raise ValueError(f"layer '{layer.name}' has a weight '{key}' the graph node does not hold")
        values.append(weights[key])
    layer.set_weights(values)


def build_model(graph: Graph) -> Any:
    """The (float) Keras functional model of `graph`."""
    import keras

    tensors: Dict[str, Any] = {}
    inputs = []
    for node in graph:
        if node.kind == NodeKind.INPUT:
            tensors[node.name] = keras.Input(shape=tuple(node.output_shape[1:]), name=node.name)
            inputs.append(tensors[node.name])
            continue
        fill = lambda ref, n=node: tensors[n.inputs[ref.index]]  # noqa: E731
        args = map_input_refs(node.call_args, fill)
        kwargs = map_input_refs(node.call_kwargs, fill)
        if node.call_target == "getitem":
            out = args[0][args[1]]
        elif node.kind == NodeKind.MODULE:
            layer = new_layer(node)
            out = layer(*args, **kwargs)
            if node.weights:
                set_layer_weights(layer, node.weights)
        else:
            out = node.call_target(*args, **kwargs)
        tensors[node.name] = out
    outputs = map_structure(graph.outputs, lambda name: tensors[name])
    return keras.Model(inputs if len(inputs) > 1 else inputs[0], outputs, name=graph.name)
