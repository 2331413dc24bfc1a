"""Capture a Keras 3 functional or Sequential model into the framework-free core graph.

A functional model already is a graph: every call of a layer or a raw `keras.ops` function (add,
multiply, concatenate, mean...) on symbolic tensors is a node of it, kept in `_nodes_by_depth`.
Capture walks those nodes, deepest first (topological order), and makes one core node per call:

- a layer: kind MODULE, its class as `type`, `get_config()` as `framework_attr`, its weights by
  their names (kernel, bias, gamma, moving_mean...) as numpy arrays;
- a raw operation: kind FUNCTION, the operation's class as `type`;
- a nested functional model (a Sequential or a Model used as a layer): inlined, its nodes named
  `<model>_<node>`;
- a layer with a fused activation (`Conv2D(..., activation="relu")`): two nodes, the layer with a
  linear activation and an `Activation` after it, so that batch norms fold and the activation is
  quantized after the function, as the target platform describes it (a recurrent layer's `activation`
  is its cell's and stays inside it);
- a separable convolution: its depthwise and 1x1 pointwise convolutions (`<name>_dw`, `<name>_pw`), so
  each kernel is quantized as its operator set says and a batch norm after it folds;
- weights by their variable names, the second of two that share a name (a Bidirectional layer's
  backward cell) as `kernel#1`.

Keras tensors are channels-last; shapes keep the example batch size. The user's model is not
modified: the graph refers to its layers only to read them (the builder makes new ones).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from hwquant.core.graph.model_graph import Graph, InputRef, Node, NodeKind, unique_name
from hwquant.errors import HwquantError

FUSED_ACTIVATION = "activation"  # config key of a layer's built-in activation


class CaptureError(HwquantError, RuntimeError):
    """A Keras model hwquant cannot read as a graph."""


def _keras():
    import keras
    return keras


def functional_of(model: Any) -> Any:
    """The functional graph behind `model` (a functional Model, or a built Sequential)."""
    keras = _keras()
    if not isinstance(model, keras.Model):
        raise CaptureError(f"expected a keras.Model, got {type(model).__name__}")
    if isinstance(model, keras.Sequential):
        inner = getattr(model, "_functional", None)
        if inner is None:
            raise CaptureError(f"the Sequential model '{model.name}' has no input shape yet: start it with "
                               "keras.Input(shape=...) or call model.build((None, ...)) before quantizing")
        return inner
    if not hasattr(model, "_nodes_by_depth") or not getattr(model, "inputs", None):
        raise CaptureError(f"'{model.name}' ({type(model).__name__}) is a subclassed model: its call() is Python "
                           "code, not a graph hwquant can read. Write it as a functional model (inputs = "
                           "keras.Input(...); outputs = layers(...)(inputs); keras.Model(inputs, outputs)) or a "
                           "Sequential, reusing the same layers and weights")
    return model


def _layer_weights(layer: Any) -> Dict[str, np.ndarray]:
    from hwquant.keras.builder import weight_keys
    return {k: np.array(_keras().ops.convert_to_numpy(w.value)) for k, w in zip(weight_keys(layer), layer.weights)}


def _separable_parts(op: Any, config: Dict[str, Any], name: str) -> List[tuple]:
    """A separable convolution as the depthwise and the 1x1 pointwise convolution it computes, so each kernel is
    quantized as the TPC says for its operator set and a batch norm after it folds (MCT splits it too):
    [(name, layer class, config, weights)]."""
    L = _keras().layers
    rank = 1 if isinstance(op, L.SeparableConv1D) else 2
    w = _layer_weights(op)
    common = {k: config[k] for k in ("data_format", "dtype", "trainable") if k in config}
    depthwise = {**common, "kernel_size": config["kernel_size"], "strides": config["strides"],
                 "padding": config["padding"], "dilation_rate": config["dilation_rate"],
                 "depth_multiplier": config["depth_multiplier"], "use_bias": False, "activation": "linear"}
    pointwise = {**common, "filters": config["filters"], "kernel_size": (1,) * rank, "use_bias": "bias" in w,
                 "activation": config.get(FUSED_ACTIVATION) or "linear"}
    return [(f"{name}_dw", L.DepthwiseConv1D if rank == 1 else L.DepthwiseConv2D, depthwise,
             {"kernel": w["depthwise_kernel"]}),
            (f"{name}_pw", L.Conv1D if rank == 1 else L.Conv2D, pointwise,
             {"kernel": w["pointwise_kernel"], **({"bias": w["bias"]} if "bias" in w else {})})]


def _batched(shape: Any, batch: int) -> Any:
    return tuple(batch if d is None else int(d) for d in shape)


def _is_float(dtype: Any) -> bool:
    name = str(dtype)
    return "float" in name or "complex" in name


class _Builder:
    def __init__(self, batch: int):
        self.batch = batch
        self.nodes: List[Node] = []
        self.names: Dict[int, str] = {}   # id(KerasTensor) -> core node name
        self.taken: set = set()

    def unique(self, base: str) -> str:
        name = unique_name(base, self.taken)
        self.taken.add(name)
        return name

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def convert(self, structure: Any, inputs: List[str]) -> Any:
        """Replace each Keras tensor in an argument structure by InputRef(i) (its name appended to inputs)."""
        keras = _keras()
        if isinstance(structure, keras.KerasTensor):
            if id(structure) not in self.names:
                raise CaptureError(f"tensor '{structure.name}' is used before it is computed")
            inputs.append(self.names[id(structure)])
            return InputRef(len(inputs) - 1)
        if isinstance(structure, (list, tuple)):
            converted = [self.convert(s, inputs) for s in structure]
            return converted if isinstance(structure, list) else tuple(converted)
        if isinstance(structure, dict):
            return {k: self.convert(v, inputs) for k, v in structure.items()}
        return structure

    def walk(self, functional: Any, prefix: str) -> None:
        """Add the nodes of `functional`, whose inputs are already named in self.names."""
        keras = _keras()
        depths = sorted(functional._nodes_by_depth, reverse=True)
        for depth in depths:
            for knode in functional._nodes_by_depth[depth]:
                op = knode.operation
                if op is None or knode.is_input:
                    continue
                if isinstance(op, keras.Model) and (isinstance(op, keras.Sequential) or hasattr(op, "_nodes_by_depth")):
                    self.inline(op, knode, prefix)
                else:
                    self.call(op, knode, prefix)

    def inline(self, model: Any, knode: Any, prefix: str) -> None:
        inner = functional_of(model)
        outer_inputs = knode.arguments.keras_tensors
        if len(outer_inputs) != len(inner.inputs):
            raise CaptureError(f"nested model '{model.name}' is called with {len(outer_inputs)} tensors but takes "
                               f"{len(inner.inputs)}")
        for outer, inner_input in zip(outer_inputs, inner.inputs):
            self.names[id(inner_input)] = self.names[id(outer)]
        self.walk(inner, f"{prefix}{model.name}_")
        for outer_out, inner_out in zip(knode.outputs, inner.outputs):
            self.names[id(outer_out)] = self.names[id(inner_out)]

    def separable(self, op: Any, config: Dict[str, Any], name: str, inputs: List[str], args: tuple,
                  kwargs: Dict[str, Any], shape: Any, path: str) -> Node:
        """The two nodes of a separable convolution (see _separable_parts); returns the pointwise one."""
        (dw_name, dw_type, dw_cfg, dw_w), (pw_name, pw_type, pw_cfg, pw_w) = _separable_parts(op, config, name)
        dw_layer = dw_type.from_config(dw_cfg)
        channels = int(next(n for n in self.nodes if n.name == inputs[0]).output_shape[-1])
        dw_shape = tuple(shape[:-1]) + (channels * int(dw_cfg["depth_multiplier"]),)
        dw = self.add(Node(self.unique(dw_name), NodeKind.MODULE, dw_type, inputs, dw_layer.get_config(), dw_w,
                           dw_layer, args, kwargs, dw_shape, module_path=path))
        pw_layer = pw_type.from_config(pw_cfg)
        return self.add(Node(self.unique(pw_name), NodeKind.MODULE, pw_type, [dw.name], pw_layer.get_config(), pw_w,
                             pw_layer, (InputRef(0),), {}, shape, module_path=path))

    def call(self, op: Any, knode: Any, prefix: str) -> None:
        keras = _keras()
        inputs: List[str] = []
        args = self.convert(tuple(knode.arguments.args), inputs)
        kwargs = self.convert({k: v for k, v in knode.arguments.kwargs.items() if v is not None}, inputs)
        outputs = knode.outputs
        shape = (_batched(outputs[0].shape, self.batch) if len(outputs) == 1
                 else [_batched(t.shape, self.batch) for t in outputs])
        path = f"{prefix}{op.name}"
        name = self.unique(path)
        if isinstance(op, keras.layers.Layer):
            config = op.get_config()
            activation = config.get(FUSED_ACTIVATION)
            # whether the activation applies to the output (a recurrent layer's is inside its cell)
            split = not isinstance(op, (keras.layers.Activation, keras.layers.RNN)) and activation not in (None, "linear")
            if split:
                config = {**config, FUSED_ACTIVATION: "linear"}
            if isinstance(op, (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)):
                node = self.separable(op, config, name, inputs, args, kwargs, shape, path)
            else:
                node = self.add(Node(name, NodeKind.MODULE, type(op), inputs, config, _layer_weights(op), op, args,
                                     kwargs, shape, module_path=path))
            if split:
                act = keras.layers.Activation(activation, name=f"{op.name}_activation")
                node = self.add(Node(self.unique(f"{name}_activation"), NodeKind.MODULE, type(act), [node.name],
                                     act.get_config(), {}, act, (InputRef(0),), {}, shape, module_path=path))
        else:
            node = self.add(Node(name, NodeKind.FUNCTION, type(op), inputs, _plain_config(op), {}, op, args, kwargs,
                                 shape, module_path=path))
        node.float_output = all(_is_float(t.dtype) for t in outputs)
        if len(outputs) == 1:
            self.names[id(outputs[0])] = node.name
        else:
            for k, t in enumerate(outputs):  # one getitem node per output of a multi-output call
                item = self.add(Node(self.unique(f"{node.name}_{k}"), NodeKind.FUNCTION, "getitem", [node.name],
                                     {"index": k}, {}, "getitem", (InputRef(0), k), {},
                                     _batched(t.shape, self.batch), module_path=node.module_path))
                item.float_output = _is_float(t.dtype)
                self.names[id(t)] = item.name


def _plain_config(op: Any) -> Dict[str, Any]:
    try:
        return dict(op.get_config())
    except Exception:  # noqa: BLE001 - an operation without a serialisable config
        return {}


def _refuse_quantized(model: Any) -> None:
    """A model holding hwquant's / MCT's quantization layers is quantized already: quantizing it again
    would quantize twice (and the float weights are gone)."""
    found = [layer.name for layer in model._flatten_layers(include_self=False)
             if type(layer).__name__ in ("KerasQuantizationWrapper", "KerasActivationQuantizationHolder")]
    if found:
        raise CaptureError(f"'{model.name}' is already quantized (it holds quantization layers: {', '.join(found[:4])}"
                           f"{' ...' if len(found) > 4 else ''}): pass the float model it was made from")


def capture(model: Any, example_inputs: Sequence[Any]) -> Graph:
    """The core graph of a functional or Sequential Keras model; shapes with the batch size of
    `example_inputs` (one array per model input)."""
    functional = functional_of(model)
    _refuse_quantized(functional)
    if len(example_inputs) != len(functional.inputs):
        raise CaptureError(f"'{model.name}' takes {len(functional.inputs)} input(s); the representative data gives "
                           f"{len(example_inputs)} array(s) per batch")
    batch = int(np.shape(example_inputs[0])[0]) if np.ndim(example_inputs[0]) else 1
    builder = _Builder(batch)
    for tensor in functional.inputs:
        name = builder.unique(tensor.name)
        node = builder.add(Node(name, NodeKind.INPUT, "input", output_shape=_batched(tensor.shape, batch)))
        node.float_output = _is_float(tensor.dtype)
        builder.names[id(tensor)] = name
    builder.walk(functional, "")
    outputs: Optional[Any] = [builder.names[id(t)] for t in functional.outputs]
    return Graph(builder.nodes, outputs[0] if len(outputs) == 1 else outputs, name=model.name)
