"""The framework-free part of the mixed-precision sensitivity (MCT's definitions): which tensors are
interest points, how their distances are weighted and combined with the outputs', the metric
normalisation. The framework adapter measures or estimates the distances themselves
(torch/mixed_precision.py)."""
from __future__ import annotations

import math
from typing import Dict, List, Sequence

import numpy as np

from hwquant.core.configuration.config import MixedPrecisionQuantizationConfig, MpDistanceWeighting, MpMetricNormalization
from hwquant.core.graph.model_graph import Graph, Node, NodeKind
from hwquant.core.pipeline.resource_utilization import max_bits_config


def needs_measurement(cfg: MixedPrecisionQuantizationConfig) -> bool:
    """Whether the distances must be measured candidate by candidate: EXP weighting (its weights depend
    on each point's distance), a custom distance or a custom metric function."""
    return (cfg.compute_distance_fn is not None or cfg.custom_metric_fn is not None
            or cfg.distance_weighting_method == MpDistanceWeighting.EXP)


def compared_outputs(graph: Graph) -> List[str]:
    """The tensors whose distances stand for the model's output: its outputs, except what a custom operator kept
    whole returns (an NMS layer's boxes, scores, labels and counts: discrete, neither comparable sample by sample
    nor differentiable), which the tensors that operator reads stand in for (as MCT replaces such outputs)."""
    found: List[str] = []
    for name in graph.output_names():
        node = graph.node(name)
        while not node.opaque and node.kind == NodeKind.FUNCTION and len(node.inputs) == 1 \
                and isinstance(graph.node(node.inputs[0]).output_shape, list):  # an item of a tuple output
            node = graph.node(node.inputs[0])
        todo = [node.name] if node.opaque else [name]
        while todo:
            current = graph.node(todo.pop(0))
            if current.opaque:
                todo += [i for i in current.inputs if graph.node(i).kind != NodeKind.CONSTANT]
            elif current.name not in found:
                found.append(current.name)
    return found


def interest_points(graph: Graph, configurable: Sequence[Node], cfg: MixedPrecisionQuantizationConfig) -> List[str]:
    """Configurable nodes' outputs (a fraction of them, spread evenly), the compared outputs excluded."""
    outputs = set(compared_outputs(graph))
    names = [n.name for n in configurable if n.name not in outputs]
    if not names:
        return []
    keep = max(1, math.ceil(len(names) * cfg.num_interest_points_factor))
    return [names[int(k * len(names) / keep)] for k in range(keep)]


def point_weights(cfg, points: List[str], outputs: List[str], hessian: Dict[str, float]) -> Dict[str, float]:
    """The weight of each point's normalised distance in the sensitivity figure."""
    weights = {o: 1.0 / len(outputs) for o in outputs}
    if not points:
        return weights
    method = cfg.distance_weighting_method
    if method == MpDistanceWeighting.LAST_LAYER:
        weights[points[-1]] = weights.get(points[-1], 0.0) + 1.0
    elif method == MpDistanceWeighting.HESSIAN:
        total = sum(hessian[p] for p in points) or 1.0
        for p in points:
            weights[p] = weights.get(p, 0.0) + hessian[p] / total
    else:  # AVG (EXP is measured)
        for p in points:
            weights[p] = weights.get(p, 0.0) + 1.0 / len(points)
    return weights


def combine_distances(cfg, dists: Dict[str, float], points: List[str], outputs: List[str], hessian: Dict[str, float]) -> float:
    out_metric = float(np.mean([dists[o] for o in outputs])) if outputs else 0.0
    if not points:
        return out_metric
    d = np.array([dists[p] for p in points])
    method = cfg.distance_weighting_method
    if method == MpDistanceWeighting.LAST_LAYER:
        ipts = d[-1]
    elif method == MpDistanceWeighting.HESSIAN:
        w = np.array([hessian.get(p, 0.0) for p in points])
        ipts = float(np.average(d, weights=w)) if w.sum() > 0 else float(d.mean())
    elif method == MpDistanceWeighting.EXP:
        w = 1 - np.exp(-d / cfg.exp_distance_weighting_sigma)
        ipts = float(np.average(d, weights=w)) if np.any(w) else 0.0
    else:
        ipts = float(d.mean())
    return float(ipts) + out_metric


def normalise_scores(scores: List[List[float]], configurable: Sequence[Node], cfg) -> List[List[float]]:
    """MCT's metric normalisation (by the max- or min-bit candidate), and metric_epsilon: every
    candidate other than the largest costs at least epsilon more than the largest."""
    out = []
    for row, node in zip(scores, configurable):
        top = node.candidates.index(max_bits_config(node))
        if cfg.metric_normalization != MpMetricNormalization.NONE:
            bits = [sum(c.bit_widths()[1].values()) + (c.bit_widths()[0] or 0) for c in node.candidates]
            ref = row[bits.index(max(bits) if cfg.metric_normalization == MpMetricNormalization.MAXBIT else min(bits))]
            row = [v / ref if ref > 0 else v for v in row]
        if cfg.metric_epsilon is not None:
            row = [v if c == top else max(v, row[top] + cfg.metric_epsilon) for c, v in enumerate(row)]
        out.append(row)
    return out
