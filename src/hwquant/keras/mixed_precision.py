"""Keras' back end of the mixed-precision sensitivity loop (core/mixed_precision/measurement.py): every
figure is measured (no gradient probes), Hessian weights by output probes through keras/gradients.py.

One quantized model serves every candidate: a candidate's kernels are assigned to its layer's
weights and its activation grid to a holder whose grid is a variable, so that the model is neither
rebuilt nor (on TensorFlow) traced again per candidate (MobileNetV2, weights at 75 %: 479 s with a
model built per candidate). The default distance is computed inside the model (squared-error layers
holding the batch's float reference): one number per sample leaves it, not the tensors."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

import keras
import numpy as np
from keras import ops

from hwquant.core.numerics import quant_math
from hwquant.core.graph.model_graph import Node
from hwquant.core.mixed_precision.measurement import SensitivityBackend
from hwquant.errors import InvalidConfigError
from hwquant.keras.builder import build_model, set_layer_weights
from hwquant.keras.gradients import gradients
from hwquant.keras.inference import predict_on_batch
from hwquant.keras.quantized_model import (HOLDER_SUFFIX, QuantizationBlocks, activation_quantizer,
                                           build_quantized_model, quantized_weights, weight_quantizers)


class _SwappableActivation(keras.layers.Layer):
    """A per-tensor activation quantizer whose grid (enabled, scale, zero point, qmin, qmax) is a variable."""

    def build(self, input_shape):
        self.grid = self.add_weight(shape=(5,), initializer="zeros", trainable=False, name="grid")

    def set_quantizer(self, quantizer: Any) -> None:
        if quantizer is None:
            self.grid.assign(np.array([0, 1, 0, 0, 0], np.float32))
            return
        grid = quantizer.grid
        if not isinstance(grid, quant_math.AffineGrid) or np.size(grid.scale) != 1:
            raise InvalidConfigError(f"'{self.name}': mixed precision of Keras activations takes per-tensor uniform "
                                     "grids (power-of-two, symmetric, uniform)")
        self.grid.assign(np.array([1, float(np.asarray(grid.scale)), float(np.asarray(grid.zero_point)), grid.qmin,
                                   grid.qmax], np.float32))

    def call(self, x):
        enabled, scale, zero_point, qmin, qmax = (self.grid[i] for i in range(5))
        return ops.where(enabled > 0, quant_math.fake_quantize_with_bounds(x, scale, zero_point, qmin, qmax), x)

    def compute_output_shape(self, input_shape):
        return input_shape


class _SwappableBlocks(QuantizationBlocks):
    """The quantized build with a swappable holder after every configurable node."""

    def __init__(self, configurable: Sequence[Node]):
        super().__init__()
        self.configurable = {n.name for n in configurable}

    def after(self, node: Node, tensor: Any) -> Any:
        if node.name not in self.configurable:
            return super().after(node, tensor)
        return _SwappableActivation(name=f"{node.name}{HOLDER_SUFFIX}")(tensor)


def _run(model: Any, batch: List[np.ndarray]) -> List[np.ndarray]:
    _, extra = predict_on_batch(model, batch if len(batch) > 1 else batch[0])
    return [np.asarray(t, np.float32) for t in extra]


def _energy(x: np.ndarray) -> np.ndarray:
    """Per-sample sum of squares."""
    rows = x.reshape(len(x), -1)
    return np.einsum("ij,ij->i", rows, rows).astype(np.float64)


class _SquaredError(keras.layers.Layer):
    """Per-sample sum of squared differences between its input and a reference batch held in a
    variable (assigned once per batch): one number per sample leaves the model instead of the tensor
    (MobileNetV2: ~600 MB a candidate, whose copy and numpy distance took 2/3 of the time)."""

    def __init__(self, rows: int, **kwargs):
        super().__init__(**kwargs)
        self.rows = rows

    def build(self, input_shape):
        self.reference = self.add_weight(shape=(self.rows,) + tuple(input_shape[1:]), initializer="zeros",
                                         trainable=False, name="reference")

    def call(self, x):
        n = ops.shape(x)[0]
        d = ops.subtract(x, self.reference[:n])
        return ops.sum(ops.reshape(ops.multiply(d, d), (n, -1)), axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0],)


def _errors_model(model: Any, observed: Sequence[str], rows: int) -> Any:
    """`model` (extra outputs: the observed tensors) ending in a _SquaredError per observed tensor."""
    extra = model.outputs[-len(observed):]
    return keras.Model(model.inputs, [_SquaredError(rows, name=f"{p}_squared_error")(t) for p, t in zip(observed, extra)])


class KerasSensitivityBackend(SensitivityBackend):
    def build(self, graph, configurable, observed, batches, cfg) -> None:
        self.observed, self.batches, self.cfg = list(observed), batches, cfg
        self.model = build_quantized_model(graph, extra_outputs=self.observed, blocks=_SwappableBlocks(configurable))
        for node in configurable:
            self.set_candidate(node, node.final_config)
        if cfg.custom_metric_fn is not None:
            return
        self.float_model = build_model(graph, extra_outputs=self.observed)
        self.reference = [_run(self.float_model, b) for b in batches]
        self.errors_model = None if cfg.compute_distance_fn is not None else \
            _errors_model(self.model, self.observed, max(len(b[0]) for b in batches))
        self.loaded = None  # the batch whose reference the squared-error layers hold

    def set_candidate(self, node: Node, candidate: Any) -> None:
        _set_candidate(self.model, node, candidate)

    def distances(self, batch_index: int) -> List[float]:
        batch, ref = self.batches[batch_index], self.reference[batch_index]
        if self.errors_model is None:
            return [float(np.mean(np.asarray(self.cfg.compute_distance_fn(r.astype(np.float64), q.astype(np.float64)))))
                    for q, r in zip(_run(self.model, batch), ref)]
        if self.loaded != batch_index:
            for p, r in zip(self.observed, ref):
                layer = self.errors_model.get_layer(f"{p}_squared_error")
                layer.reference.assign(np.concatenate([r, np.zeros((layer.rows - len(r),) + r.shape[1:], r.dtype)]))
            self.energies, self.loaded = [_energy(r) for r in ref], batch_index
        squared = predict_on_batch(self.errors_model, batch if len(batch) > 1 else batch[0])
        return [float((np.asarray(e, np.float64) / (energy + 1e-12)).mean()) for e, energy in zip(squared, self.energies)]

    def hessian_traces(self, points, outputs) -> Dict[str, float]:
        """E|d(sum_o v_o . Y_o / |Y_o|) / dY_p|^2 / size(Y_p) with Gaussian probes v_o at the outputs."""
        index = {name: i for i, name in enumerate(self.observed)}
        traces = dict.fromkeys(points, 0.0)
        rng = np.random.default_rng(1)
        for batch, ref in zip(self.batches, self.reference):
            energy = {o: float(_energy(ref[index[o]]).mean()) + 1e-12 for o in outputs}
            probes = {o: rng.standard_normal(ref[index[o]].shape).astype(np.float32) for o in outputs}

            def forward(xs, energy=energy, probes=probes):
                _, tensors = self.float_model(xs if len(xs) > 1 else xs[0], training=False)
                loss = sum(ops.sum(ops.multiply(tensors[index[o]], ops.convert_to_tensor(probes[o])))
                           / float(np.sqrt(energy[o])) for o in outputs)
                return loss, [tensors[index[p]] for p in points]
            for p, g in zip(points, gradients(forward, batch, "Hessian-weighted mixed precision")):
                if g is not None:
                    traces[p] += float(np.square(g, dtype=np.float64).sum()) / g[0].size
        return traces


def _set_candidate(model: Any, node: Node, candidate: Any) -> None:
    """Put the node's candidate into the model: its quantized weights, its activation grid."""
    node.final_config = candidate
    if node.weights:
        name = f"quant_{node.name}" if any(layer.name == f"quant_{node.name}" for layer in model.layers) else node.name
        layer = model.get_layer(name)
        set_layer_weights(getattr(layer, "layer", layer), quantized_weights(node, weight_quantizers(node)))
    model.get_layer(f"{node.name}{HOLDER_SUFFIX}").set_quantizer(activation_quantizer(node))
