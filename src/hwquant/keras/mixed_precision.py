"""Mixed-precision sensitivities of a Keras model, measured: for each configurable node and candidate,
the quantized model with that node at the candidate and every other configurable node at its largest
candidate, run on the first `num_of_images` images; its distances to the float model at the interest
points and outputs combine by MCT's rules (core/mixed_precision/sensitivity.py). Hessian weighting
needs gradients through the float model and is not available for Keras."""
from __future__ import annotations

from typing import Any, Iterable, List, Sequence

import numpy as np

from hwquant.core.config import MixedPrecisionQuantizationConfig, MpDistanceWeighting
from hwquant.core.graph import Graph, Node
from hwquant.core.mixed_precision.sensitivity import combine_distances, interest_points, normalise_scores
from hwquant.core.resource_utilization import max_bits_config
from hwquant.errors import InvalidConfigError
from hwquant.keras.builder import build_model
from hwquant.keras.quantized_model import build_quantized_model


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
    return [np.asarray(t, np.float64) for t in extra]


def _distance(cfg: MixedPrecisionQuantizationConfig, reference: np.ndarray, quantized: np.ndarray) -> float:
    if cfg.compute_distance_fn is not None:
        return float(np.mean(np.asarray(cfg.compute_distance_fn(reference, quantized))))
    n = reference.shape[0]
    err = ((quantized - reference) ** 2).reshape(n, -1).sum(1)
    return float((err / ((reference ** 2).reshape(n, -1).sum(1) + 1e-12)).mean())


def candidate_sensitivity(graph: Graph, configurable: Sequence[Node], data: Iterable[List[Any]],
                          cfg: MixedPrecisionQuantizationConfig) -> List[List[float]]:
    if cfg.distance_weighting_method == MpDistanceWeighting.HESSIAN:
        raise InvalidConfigError("Hessian-weighted mixed precision is not available for Keras models: use "
                                 "MixedPrecisionQuantizationConfig(use_hessian_based_scores=False) (AVG, LAST_LAYER "
                                 "or EXP distance weighting)")
    batches = _images(data, cfg.num_of_images)
    points, outputs = interest_points(graph, configurable, cfg), list(graph.output_names())
    observed = list(dict.fromkeys(points + outputs))
    reference = [_run(build_model(graph, extra_outputs=observed), b) for b in batches]
    finals = {n.name: n.final_config for n in configurable}
    scores = []
    try:
        for node in configurable:
            row = []
            for cand in node.candidates:
                for other in configurable:
                    other.final_config = max_bits_config(other)
                node.final_config = cand
                model = build_quantized_model(graph, extra_outputs=observed)
                if cfg.custom_metric_fn is not None:
                    row.append(float(cfg.custom_metric_fn(model)))
                    continue
                dists = {p: 0.0 for p in observed}
                for b, ref in zip(batches, reference):
                    for p, q, r in zip(observed, _run(model, b), ref):
                        dists[p] += _distance(cfg, r, q) / len(batches)
                row.append(combine_distances(cfg, dists, points, outputs, {}))
            scores.append(row)
    finally:
        for node in configurable:
            node.final_config = finals[node.name]
    return normalise_scores(scores, configurable, cfg)
