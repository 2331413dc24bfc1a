"""Keras 3's back end of the GPTQ training loop (gptq/training.py): the student and teacher models, the
optimizers, the loss of one step and its gradients (keras/gradients.py: torch and TensorFlow), the
Hessian scores, the teacher's kept activations and the bias correction's candidates.

Simplification against the PyTorch back end: the bias correction chooses between the analytic
correction and none (PyTorch also measures a correction in the quantized model)."""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np
from keras import ops

from hwquant.core.graph import Graph, Node
from hwquant.core.node_params import restore_biases
from hwquant.errors import InvalidConfigError
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.hessian import HESSIAN_ITERATIONS, rademacher, vjp_scores
from hwquant.gptq.training import (AnalyticCorrection, GPTQBackend, LearnedLayer, install_kernels, interest_point,
                                   optimizer_groups)
from hwquant.keras.builder import build_model
from hwquant.keras.gptq.loss import multiple_tensors_mse_loss, sample_layer_attention_loss
from hwquant.keras.gptq.quantizers import BaseKerasGPTQTrainableQuantizer
from hwquant.keras.gradients import gradients_of_each, variable_gradients
from hwquant.keras.quantizers import KerasQuantizationWrapper, strided_pointwise_on_torch
from hwquant.keras.trainable import BaseKerasTrainableQuantizer
from hwquant.keras.trainable.model import TrainableBlocks
from hwquant.logger import progress
from hwquant.trainable_infrastructure.common import TrainingMethod, VariableGroup
from hwquant.trainable_infrastructure.node_configs import (trainable_activation_config, trainable_quantizer_classes,
                                                          trainable_weights_config)

# The teacher's interest-point activations are kept for every sample when they take at most this many
# bytes (otherwise the teacher runs at every step).
TEACHER_CACHE_BYTES = 1 << 30


class GradualActivationQuantizer:
    """``x + f (q(x) - x)``: the quantized fraction ``f`` of an activation quantizer's output (a
    non-trainable variable of the holder), set by the GPTQ loop at each step."""

    def __init__(self, quantizer: BaseKerasTrainableQuantizer):
        self.quantizer = quantizer
        self.fraction: Any = None

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


def _numpy(x: Any) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(x))


def _make_optimizer(spec: Any, what: str) -> Any:
    """A fresh Keras optimizer from the config's ``spec``: an optimizer (its class and settings; the given
    instance is left alone), an optimizer class, or a function returning one."""
    if isinstance(spec, keras.optimizers.Optimizer):
        return type(spec).from_config(spec.get_config())
    if isinstance(spec, type) and issubclass(spec, keras.optimizers.Optimizer):
        return spec()
    made = spec() if callable(spec) and not isinstance(spec, type) else None
    if isinstance(made, keras.optimizers.Optimizer):
        return made
    origin = type(spec).__module__.split(".")[0]
    hint = "" if origin in ("keras", "builtins") else \
        f" (that is a {origin} optimizer: Keras GPTQ trains with Keras 3's optimizers)"
    raise InvalidConfigError(f"GradientPTQConfig.{what} must be a keras.optimizers.Optimizer (e.g. "
                             f"keras.optimizers.Adam(learning_rate=1e-2)), its class or a function returning one; got "
                             f"{type(spec).__name__}{hint}")


class KerasGPTQBackend(GPTQBackend):
    def __init__(self, adapter: Any, seed: int = 0):
        self.adapter = adapter
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ models
    def build(self, graph: Graph, cfg: GradientPTQConfig, samples: Sequence[Any]) -> List[Node]:
        self.graph, self.samples = graph, [np.asarray(s) for s in samples]
        adapter, override = self.adapter, cfg.gptq_quantizer_params_override
        weights, activations = trainable_quantizer_classes(
            graph, adapter.kernel_attr, (cfg.rounding_type, BaseKerasGPTQTrainableQuantizer, override),
            (TrainingMethod.STE, BaseKerasTrainableQuantizer, {}), "GPTQ")
        self.quantizers: Dict[str, BaseKerasGPTQTrainableQuantizer] = {}
        self.gradual: List[GradualActivationQuantizer] = []

        def make_weights(node: Node, attr: str) -> BaseKerasGPTQTrainableQuantizer:
            q = self.quantizers[node.name] = weights[node.name](trainable_weights_config(node, attr), **override)
            q.init_rounding(node.weights[attr])
            return q

        def make_activation(node: Node) -> Any:
            q = activations[node.name](trainable_activation_config(node), freeze_quant_params=True)
            if cfg.gradual_activation_quantization_config is None:
                return q
            self.gradual.append(GradualActivationQuantizer(q))
            return self.gradual[-1]

        self.layers = [graph.node(name) for name in weights]
        points = [interest_point(node) for node in self.layers]
        self.student = build_model(graph, points, TrainableBlocks(adapter.kernel_attr, make_weights, make_activation),
                                   extra_outputs_unquantized=True)
        self.teacher = build_model(graph, points, _DifferentiableFloatBlocks())
        self.wrappers = {node.name: self.student.get_layer(f"quant_{node.name}") for node in self.layers}
        return self.layers

    def _inputs(self, arrays: Sequence[np.ndarray]) -> Any:
        tensors = [ops.convert_to_tensor(a) for a in arrays]
        return tensors if len(tensors) > 1 else tensors[0]

    def _teacher_points(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        return [_numpy(t) for t in self.teacher(self._inputs(arrays), training=False)[1]]

    # ------------------------------------------------------------------ Hessian scores
    def hessian_scores(self, n_samples: int, batch_size: int, per_sample: bool) -> np.ndarray:
        rng = np.random.default_rng(0)
        scores = []
        for i in progress(range(0, n_samples, batch_size), "Hessian scores of the GPTQ interest points"):
            batch = [s[i:min(i + batch_size, n_samples)] for s in self.samples]

            def forward(xs):
                outputs, points = self.teacher(xs if len(xs) > 1 else xs[0], training=False)
                flat = ops.concatenate([ops.reshape(t, (ops.shape(t)[0], -1)) for t in keras.tree.flatten(outputs)], 1)
                probes = [rademacher(rng, tuple(flat.shape)) for _ in range(HESSIAN_ITERATIONS)]
                return [ops.sum(flat * ops.convert_to_tensor(v)) for v in probes], points
            total = np.zeros((len(batch[0]), len(self.layers)))
            for grads in gradients_of_each(forward, batch, "GPTQ's Hessian-based weights"):
                for j, g in enumerate(grads):
                    if g is not None:  # a point the output does not depend on scores 0
                        total[:, j] += vjp_scores(g, -1, per_sample)  # (Keras: channels last)
            scores.append(total / HESSIAN_ITERATIONS)
        return np.concatenate(scores)

    # ------------------------------------------------------------------ training
    def _variable_groups(self, cfg: GradientPTQConfig) -> Tuple[List[Any], List[Any], List[Any]]:
        rounding = [v for q in self.quantizers.values() for v in q.get_trainable_variables(VariableGroup.WEIGHTS)]
        qparams = [v for q in self.quantizers.values() for v in q.get_trainable_variables(VariableGroup.QPARAMS)]
        biases = []
        if cfg.train_bias:
            for node in self.layers:
                bias = self.wrappers[node.name]._layer_weights().get(self.adapter.bias_attr(node) or "")
                if bias is not None:
                    biases.append(bias)
        return rounding, biases, qparams

    def start(self, cfg: GradientPTQConfig, loss_weights: np.ndarray, regularizer_weights: np.ndarray,
              batch_size: int) -> None:
        self.loss_weights = np.asarray(loss_weights, np.float32)
        self.per_sample = self.loss_weights.ndim == 2
        self.reg_weights = np.asarray(regularizer_weights, np.float32)
        self.loss_fn = cfg.loss or (sample_layer_attention_loss if self.per_sample else multiple_tensors_mse_loss)
        self.custom_loss, self.regularization_factor = cfg.loss is not None, cfg.regularization_factor
        self.batch_size = batch_size
        rounding, biases, qparams = self._variable_groups(cfg)
        self.rounding = rounding
        self.groups = [(_make_optimizer(spec, name), params)
                       for spec, name, params in optimizer_groups(cfg, rounding, biases, qparams)]
        self.variables = [v for _, vs in self.groups for v in vs]
        self.last_gradients: List[Any] = [None] * len(rounding)
        n = len(self.samples[0])
        first = self._teacher_points([s[:batch_size] for s in self.samples])
        per_sample_bytes = sum(t.nbytes for t in first) / max(len(first[0]), 1)
        self.cache: Optional[List[np.ndarray]] = None
        if per_sample_bytes * n <= TEACHER_CACHE_BYTES:
            parts = [first] + [self._teacher_points([s[i:i + batch_size] for s in self.samples])
                               for i in range(batch_size, n, batch_size)]
            self.cache = [np.concatenate(p) for p in zip(*parts)]
        self.teacher_cached = self.cache is not None

    def shuffle(self, n_samples: int) -> Sequence[Any]:
        return self.rng.permutation(n_samples)

    def set_quantized_fraction(self, fraction: float) -> None:
        for g in self.gradual:
            g.fraction.assign(fraction)

    def step(self, indices: Any, beta: float) -> float:
        x = [s[indices] for s in self.samples]
        target = [c[indices] for c in self.cache] if self.cache is not None else self._teacher_points(x)
        target_t = [ops.convert_to_tensor(t) for t in target]
        weights = ops.convert_to_tensor(self.loss_weights[indices] if self.per_sample else self.loss_weights)
        inputs = self._inputs(x)

        def loss_fn():
            _, points = self.student(inputs, training=True)
            kernels_q = kernels_f = None
            if self.custom_loss:  # a user's loss may look at the kernels
                kernels_f = [[self.wrappers[n.name]._layer_weights()[self.adapter.kernel_attr(n)].value] for n in self.layers]
                kernels_q = [[self.quantizers[n.name](k[0], training=True)] for n, k in zip(self.layers, kernels_f)]
            none = [None] * len(points)
            loss = self.loss_fn(list(points), target_t, kernels_q, kernels_f, none, none, weights)
            if self.regularization_factor:
                reg = sum(float(w) * self.quantizers[n.name].rounding_regularization(beta)
                          for w, n in zip(self.reg_weights, self.layers))
                loss = loss + self.regularization_factor * reg / max(float(self.reg_weights.max()), 1e-30)
            return loss

        loss, grads = variable_gradients(loss_fn, self.variables, "GPTQ")
        self.last_gradients = grads[:len(self.rounding)]
        start = 0
        for optimizer, variables in self.groups:
            optimizer.apply_gradients(zip(grads[start:start + len(variables)], variables))
            start += len(variables)
        return float(_numpy(loss))

    def rounding_state(self) -> tuple:
        return ([None if g is None else _numpy(g) for g in self.last_gradients], [_numpy(v) for v in self.rounding])

    def learned(self, train_bias: bool) -> Dict[str, LearnedLayer]:
        self.cache = None  # free it for the bias correction
        out = {}
        for node in self.layers:
            q, attr = self.quantizers[node.name], self.adapter.kernel_attr(node)
            held = self.wrappers[node.name]._layer_weights()
            bias_attr = self.adapter.bias_attr(node)
            keep_bias = train_bias and bias_attr in held and bias_attr in node.weights
            out[node.name] = LearnedLayer(attr, _numpy(q(held[attr].value, training=False)).astype(np.float32),
                                          _numpy(held[bias_attr]).astype(np.float32) if keep_bias else None,
                                          q.inferable_params() if q.quantization_parameter_learning else None)
        return out

    # ------------------------------------------------------------------ bias correction
    def _output_error(self, graph: Graph, batches: List[List[np.ndarray]], targets: List[List[np.ndarray]]) -> float:
        model = self.adapter.build(graph, quantized=True)
        err = energy = 0.0
        for x, target in zip(batches, targets):
            outs = [_numpy(t) for t in keras.tree.flatten(model(self._inputs(x), training=False))]
            err += sum(float(np.square(o.astype(np.float64) - t).sum()) for o, t in zip(outs, target))
            energy += sum(float(np.square(t.astype(np.float64)).sum()) for t in target)
        return err / max(energy, 1e-30)

    def correct_biases(self, graph: Graph, kernels: Dict[str, np.ndarray], analytic: AnalyticCorrection,
                       layers: List[str], point_of: Dict[str, str]) -> Dict[str, Any]:
        if not layers:
            install_kernels(graph, self.adapter, kernels)
            return {"bias_correction": None, "bias_corrected": []}
        other = copy.deepcopy(graph)
        analytic(other, kernels)
        install_kernels(other, self.adapter, kernels)
        install_kernels(graph, self.adapter, kernels)
        n, size = len(self.samples[0]), self.batch_size
        batches = [[s[i:i + size] for s in self.samples] for i in range(0, n, size)]
        targets = [[_numpy(t) for t in keras.tree.flatten(self.teacher(self._inputs(x), training=False)[0])]
                   for x in batches]
        errors = {"none": self._output_error(graph, batches, targets), "analytic": self._output_error(other, batches, targets)}
        if errors["analytic"] >= errors["none"]:
            return {"bias_correction": "none", "bias_corrected": [], "output_error": errors}
        restore_biases(graph, self.adapter, {name: other.node(name).weights.get(self.adapter.bias_attr(other.node(name)))
                                             for name in layers})
        return {"bias_correction": "analytic", "bias_corrected": list(layers), "output_error": errors}
