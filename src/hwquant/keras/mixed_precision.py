"""Mixed-precision sensitivities of a Keras model, measured: for each configurable node and candidate,
the quantized model with that node at the candidate and every other configurable node at its largest
candidate, run on the first `num_of_images` images; its distances to the float model at the interest
points and outputs combine by MCT's rules (core/mixed_precision/sensitivity.py). Hessian weighting
needs gradients through the float model and is not available for Keras.

One quantized model serves every candidate: a candidate's kernels are assigned to its layer's
weights and its activation grid to a holder whose grid is a variable, so that the model is neither
rebuilt nor (on TensorFlow) traced again per candidate (MobileNetV2, weights at 75 %: 479 s with a
model built per candidate)."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Sequence

import keras
import numpy as np
from keras import ops

from hwquant.core import quant_math
from hwquant.core.config import MixedPrecisionQuantizationConfig, MpDistanceWeighting
from hwquant.core.graph import Graph, Node
from hwquant.core.mixed_precision.sensitivity import combine_distances, interest_points, normalise_scores
from hwquant.core.resource_utilization import max_bits_config
from hwquant.errors import InvalidConfigError
from hwquant.keras.builder import build_model, set_layer_weights
from hwquant.keras.quantized_model import (HOLDER_SUFFIX, QuantizationBlocks, activation_quantizer, build_quantized_model,
                                           quantized_weights, weight_quantizers)


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
        q = ops.clip(ops.add(ops.round(ops.divide(x, scale)), zero_point), qmin, qmax)
        return ops.where(enabled > 0, ops.multiply(ops.subtract(q, zero_point), scale), x)

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


def _images(data: Iterable[List[np.ndarray]], n: int) -> List[List[np.ndarray]]:
    batches, seen = [], 0
    for batch in data:
        if seen >= n:
            break
        take = min(len(batch[0]), n - seen)
        batches.append([a[:take] for a in batch])
        seen += take
    return batches


def _run(model: Any, batch: List[np.ndarray]) -> List[np.ndarray]:
    _, extra = model.predict_on_batch(batch if len(batch) > 1 else batch[0])
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


def _candidate_distances(model: Any, configurable: Sequence[Node], observed: Sequence[str],
                         batches: List[List[np.ndarray]], reference: List[List[np.ndarray]],
                         cfg: MixedPrecisionQuantizationConfig) -> Dict[tuple, Dict[str, float]]:
    """{(node index, candidate index): {observed tensor: distance to the float model}}: MCT's default
    distance (mean over samples of the relative squared error) computed in the model, or the user's
    compute_distance_fn on the tensors."""
    out: Dict[tuple, Dict[str, float]] = {}
    errors_model = None if cfg.compute_distance_fn is not None else \
        _errors_model(model, observed, max(len(b[0]) for b in batches))
    for batch, ref in zip(batches, reference):
        if errors_model is not None:
            energies = [_energy(r) for r in ref]
            for p, r in zip(observed, ref):
                layer = errors_model.get_layer(f"{p}_squared_error")
                layer.reference.assign(np.concatenate([r, np.zeros((layer.rows - len(r),) + r.shape[1:], r.dtype)]))
        for i, node in enumerate(configurable):
            for j, cand in enumerate(node.candidates):
                _set_candidate(model, node, cand)
                if errors_model is None:
                    dists = [float(np.mean(np.asarray(cfg.compute_distance_fn(r.astype(np.float64), q.astype(np.float64)))))
                             for q, r in zip(_run(model, batch), ref)]
                else:
                    squared = errors_model.predict_on_batch(batch if len(batch) > 1 else batch[0])
                    dists = [float((np.asarray(e, np.float64) / (energy + 1e-12)).mean())
                             for e, energy in zip(squared, energies)]
                totals = out.setdefault((i, j), dict.fromkeys(observed, 0.0))
                for p, d in zip(observed, dists):
                    totals[p] += d / len(batches)
            _set_candidate(model, node, max_bits_config(node))
    return out


def _set_candidate(model: Any, node: Node, candidate: Any) -> None:
    """Put the node's candidate into the model: its quantized weights, its activation grid."""
    node.final_config = candidate
    if node.weights:
        name = f"quant_{node.name}" if any(layer.name == f"quant_{node.name}" for layer in model.layers) else node.name
        layer = model.get_layer(name)
        set_layer_weights(getattr(layer, "layer", layer), quantized_weights(node, weight_quantizers(node)))
    model.get_layer(f"{node.name}{HOLDER_SUFFIX}").set_quantizer(activation_quantizer(node))


def candidate_sensitivity(graph: Graph, configurable: Sequence[Node], data: Iterable[List[Any]],
                          cfg: MixedPrecisionQuantizationConfig) -> List[List[float]]:
    if cfg.distance_weighting_method == MpDistanceWeighting.HESSIAN:
        raise InvalidConfigError("Hessian-weighted mixed precision is not available for Keras models: use "
                                 "MixedPrecisionQuantizationConfig(use_hessian_based_scores=False) (AVG, LAST_LAYER "
                                 "or EXP distance weighting)")
    batches = _images(data, cfg.num_of_images)
    points, outputs = interest_points(graph, configurable, cfg), list(graph.output_names())
    observed = list(dict.fromkeys(points + outputs))
    finals: Dict[str, Any] = {n.name: n.final_config for n in configurable}
    try:
        for node in configurable:
            node.final_config = max_bits_config(node)
        model = build_quantized_model(graph, extra_outputs=observed, blocks=_SwappableBlocks(configurable))
        for node in configurable:
            _set_candidate(model, node, node.final_config)
        if cfg.custom_metric_fn is not None:
            scores = []
            for node in configurable:
                scores.append([_metric(model, node, cand, cfg) for cand in node.candidates])
                _set_candidate(model, node, max_bits_config(node))
        else:
            float_model = build_model(graph, extra_outputs=observed)
            reference = [_run(float_model, b) for b in batches]
            distances = _candidate_distances(model, configurable, observed, batches, reference, cfg)
            scores = [[combine_distances(cfg, distances[i, j], points, outputs, {}) for j in range(len(node.candidates))]
                      for i, node in enumerate(configurable)]
    finally:
        for node in configurable:
            node.final_config = finals[node.name]
    return normalise_scores(scores, configurable, cfg)


def _metric(model: Any, node: Node, candidate: Any, cfg: MixedPrecisionQuantizationConfig) -> float:
    _set_candidate(model, node, candidate)
    return float(cfg.custom_metric_fn(model))
