"""Keras 3's back end of the GPTQ loop (gptq/training.py): the student and teacher models, keras.ops for the
framework-free losses, the optimizers and their step (gradients on the torch and TensorFlow backends:
keras/gradients.py), the Hessian scores' vector-Jacobian products (scored by gptq/hessian.py)."""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, List, Sequence

import keras
import numpy as np
from keras import ops

from hwquant.core.graph.model_graph import Graph, Node
from hwquant.gptq import loss
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.hessian import HESSIAN_ITERATIONS, probed_scores, rademacher
from hwquant.gptq.training import GPTQBackend, StudentQuantizers, fresh_optimizer
from hwquant.keras.array_namespace import OPS
from hwquant.keras.builder import build_model
from hwquant.keras.gptq.quantizers import BaseKerasGPTQTrainableQuantizer
from hwquant.keras.gradients import gradients_of_each, variable_gradients
from hwquant.keras.quantizers import KerasQuantizationWrapper, strided_pointwise_on_torch
from hwquant.keras.trainable import BaseKerasTrainableQuantizer
from hwquant.keras.trainable.model import TrainableBlocks


def _numpy(x: Any) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(x))


multiple_tensors_mse_loss = partial(loss.multiple_tensors_mse_loss, OPS)  # MCT's default losses, on Keras tensors
sample_layer_attention_loss = partial(loss.sample_layer_attention_loss, OPS)


class GradualActivationQuantizer:
    """``x + f (q(x) - x)``: the quantized fraction ``f`` of an activation quantizer's output (a non-trainable
    variable of the holder), set by the GPTQ loop at each step."""

    def __init__(self, quantizer: BaseKerasTrainableQuantizer):
        self.quantizer, self.fraction = quantizer, None

    def initialize_quantization(self, tensor_shape, name: str, layer: Any) -> None:
        self.quantizer.initialize_quantization(tensor_shape, name, layer)
        self.fraction = layer.add_weight(name="q_fraction", shape=(), initializer="ones", trainable=False)

    def __call__(self, inputs: Any, training: Any = True) -> Any:
        return inputs + ops.cast(self.fraction, inputs.dtype) * (self.quantizer(inputs, training=training) - inputs)


class _DifferentiableFloatBlocks:
    """The float model, its strided 1x1 convolutions wrapped so that the Hessian probes' backward pass runs on
    Keras' torch backend (keras/quantizers.py: strided_pointwise_on_torch)."""

    def wrap(self, node: Node, layer: Any) -> Any:
        return KerasQuantizationWrapper(layer, {}, name=f"float_{node.name}") if strided_pointwise_on_torch(layer) else layer

    def weights(self, node: Node) -> Dict[Any, Any]:
        return node.weights

    def after(self, node: Node, tensor: Any) -> Any:
        return tensor


class KerasGPTQBackend(GPTQBackend):
    ops = OPS

    def __init__(self, adapter: Any):
        self.adapter = adapter

    def build(self, graph: Graph, cfg: GradientPTQConfig, samples: Sequence[Any]) -> List[Node]:
        self.samples = [np.asarray(s) for s in samples]
        made = StudentQuantizers(graph, self.adapter, cfg, BaseKerasGPTQTrainableQuantizer, BaseKerasTrainableQuantizer,
                                 GradualActivationQuantizer)
        self.layers, points, self.gradual = made.layers, made.points, made.gradual
        self.student = build_model(graph, points, TrainableBlocks(self.adapter.kernel_attr, made.weights, made.activation),
                                   extra_outputs_unquantized=True)
        self.teacher = build_model(graph, points, _DifferentiableFloatBlocks())
        self.float_model = build_model(graph)
        self.quantizers = made.kernels
        self.held = [self.student.get_layer(f"quant_{node.name}")._layer_weights() for node in self.layers]
        return self.layers

    def _call(self, model: Any, inputs: List[Any], training: bool) -> Any:
        tensors = [ops.convert_to_tensor(x) for x in inputs]
        return model(tensors if len(tensors) > 1 else tensors[0], training=training)

    def hessian_scores(self, n_samples: int, batch_size: int, per_sample: bool) -> np.ndarray:
        rng = np.random.default_rng(0)

        def forward(xs):
            outputs, points = self.teacher(xs if len(xs) > 1 else xs[0], training=False)
            flat = ops.concatenate([ops.reshape(t, (ops.shape(t)[0], -1)) for t in keras.tree.flatten(outputs)], 1)
            probes = [rademacher(rng, tuple(flat.shape)) for _ in range(HESSIAN_ITERATIONS)]
            return [ops.sum(flat * ops.convert_to_tensor(v)) for v in probes], points
        batches = [[s[i:min(i + batch_size, n_samples)] for s in self.samples] for i in range(0, n_samples, batch_size)]
        return probed_scores(batches, lambda batch: gradients_of_each(forward, batch, "GPTQ's Hessian-based weights"),
                             [-1] * len(self.layers), per_sample)  # (Keras: channels last)

    def teacher_points(self, inputs: List[Any]) -> List[Any]:
        return [ops.stop_gradient(t) for t in self._call(self.teacher, inputs, False)[1]]

    def student_points(self, inputs: List[Any]) -> List[Any]:
        return list(self._call(self.student, inputs, True)[1])

    def kernels(self) -> tuple:
        floats = [[held[self.adapter.kernel_attr(n)].value] for n, held in zip(self.layers, self.held)]
        return [[q(k[0], training=True)] for q, k in zip(self.quantizers, floats)], floats

    def trained_biases(self, train_bias: bool) -> List[Any]:
        return [held[self.adapter.bias_attr(n)] for n, held in zip(self.layers, self.held)
                if train_bias and self.adapter.bias_attr(n) in held]

    def make_optimizers(self, groups: List[tuple]) -> None:
        self.groups = [(fresh_optimizer(spec, name, keras.optimizers.Optimizer, lambda o: type(o).from_config(o.get_config()),
                                        lambda f: f(), "keras.optimizers.Optimizer (e.g. keras.optimizers.Adam("
                                        "learning_rate=1e-2))"), params) for spec, name, params in groups]
        self.variables = [v for _, vs in self.groups for v in vs]
        self.rounding, self.last_gradients = groups[0][2], [None] * len(groups[0][2])

    def train_step(self, loss: Callable[[], Any]) -> float:
        value, grads = variable_gradients(loss, self.variables, "GPTQ")
        self.last_gradients = grads[:len(self.rounding)]
        start = 0
        for optimizer, variables in self.groups:
            optimizer.apply_gradients(zip(grads[start:start + len(variables)], variables))
            start += len(variables)
        return float(_numpy(value))

    def set_quantized_fraction(self, fraction: float) -> None:
        for g in self.gradual:
            g.fraction.assign(fraction)

    def rounding_state(self) -> tuple:
        return ([None if g is None else _numpy(g) for g in self.last_gradients], [_numpy(v) for v in self.rounding])

    def learned(self, train_bias: bool) -> List[tuple]:
        out = []
        for node, q, held in zip(self.layers, self.quantizers, self.held):
            bias_attr = self.adapter.bias_attr(node)
            keep_bias = train_bias and bias_attr in held and bias_attr in node.weights
            out.append((_numpy(q(held[self.adapter.kernel_attr(node)].value, training=False)).astype(np.float32),
                        _numpy(held[bias_attr]).astype(np.float32) if keep_bias else None))
        return out
