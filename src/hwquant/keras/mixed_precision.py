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
    """Per-sample sum of squares (float32 SIMD dot products: tensors of millions of values a candidate)."""
    rows = x.reshape(len(x), -1)
    return np.einsum("ij,ij->i", rows, rows).astype(np.float64)


def _distance(cfg: MixedPrecisionQuantizationConfig, reference: np.ndarray, energy: np.ndarray,
              quantized: np.ndarray) -> float:
    """MCT's default distance (mean over samples of the relative squared error), or the user's."""
    if cfg.compute_distance_fn is not None:
        return float(np.mean(np.asarray(cfg.compute_distance_fn(reference.astype(np.float64),
                                                                 quantized.astype(np.float64)))))
    return float((_energy(quantized - reference) / (energy + 1e-12)).mean())


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
    float_model = build_model(graph, extra_outputs=observed)
    reference = [_run(float_model, b) for b in batches]
    energies = [[_energy(r) for r in ref] for ref in reference]
    finals: Dict[str, Any] = {n.name: n.final_config for n in configurable}
    scores = []
    try:
        for other in configurable:
            other.final_config = max_bits_config(other)
        model = build_quantized_model(graph, extra_outputs=observed, blocks=_SwappableBlocks(configurable))
        for other in configurable:
            _set_candidate(model, other, other.final_config)
        for node in configurable:
            row = []
            for cand in node.candidates:
                _set_candidate(model, node, cand)
                if cfg.custom_metric_fn is not None:
                    row.append(float(cfg.custom_metric_fn(model)))
                    continue
                dists = {p: 0.0 for p in observed}
                for b, ref, energy in zip(batches, reference, energies):
                    for p, q, r, e in zip(observed, _run(model, b), ref, energy):
                        dists[p] += _distance(cfg, r, e, q) / len(batches)
                row.append(combine_distances(cfg, dists, points, outputs, {}))
            _set_candidate(model, node, max_bits_config(node))
            scores.append(row)
    finally:
        for node in configurable:
            node.final_config = finals[node.name]
    return normalise_scores(scores, configurable, cfg)
