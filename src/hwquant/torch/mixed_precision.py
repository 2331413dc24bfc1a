"""Sensitivity of each configurable node to each of its candidates, measured on the float model.

Quantizing node i with candidate c changes its output by ``dY = Y_c - Y``. The distance this causes
at an interest point p (a configurable node's output, or a model output) is, to first order,
``|J_pi dY|^2`` with J_pi the Jacobian of p's tensor with respect to node i's. For a random Gaussian
vector v_p at every interest point, ``g_i = d(sum_p v_p . Y_p) / dY_i`` gives
``E[(g_i . dY)^2] = sum_p |J_pi dY|^2`` (the cross terms vanish in expectation): one backward pass
serves every node and every candidate at once, where re-running the model per candidate would cost
a forward pass for each. Scaling v_p by ``sqrt(w_p / E|Y_p|^2)`` weights and normalises the
interest points (AVG: every sampled configurable output and the model outputs, equally; LAST_LAYER
and HESSIAN: the model outputs, whose distance this estimator computes through the Gauss-Newton
Hessian ``J^T J`` of each node, so the two coincide). The local term (p = i) is exact: J_ii is the
identity.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Sequence

import torch

from hwquant.core.config import MixedPrecisionQuantizationConfig, MpDistanceWeighting, MpMetricNormalization
from hwquant.core.graph import Graph, Node, NodeKind
from hwquant.errors import InvalidConfigError
from hwquant.torch.builder import QuantizerFactory, build_module, make_layer

PROBE_ROUNDS = 4  # backward passes per batch; each image brings its own probe, so 4 x images samples


def _check_supported(cfg: MixedPrecisionQuantizationConfig) -> None:
    unsupported = [name for name in ("compute_distance_fn", "custom_metric_fn") if getattr(cfg, name) is not None]
    if cfg.distance_weighting_method == MpDistanceWeighting.EXP:
        unsupported.append("distance_weighting_method=EXP")
    if unsupported:
        raise InvalidConfigError(f"mixed precision with {', '.join(unsupported)} is not available in this version of "
                                 "hwquant; leave them at their defaults (distance weighting AVG, LAST_LAYER or HESSIAN)")


def _interest_points(graph: Graph, configurable: Sequence[Node], cfg: MixedPrecisionQuantizationConfig) -> List[str]:
    outputs = graph.output_names()
    if cfg.distance_weighting_method in (MpDistanceWeighting.LAST_LAYER, MpDistanceWeighting.HESSIAN):
        return list(outputs)
    names = [n.name for n in configurable]
    keep = max(1, math.ceil(len(names) * cfg.num_interest_points_factor))
    step = len(names) / keep
    return [names[int(k * step)] for k in range(keep) if names[int(k * step)] not in outputs] + list(outputs)


def _candidate_output(node: Node, cfg, x: Any, y: torch.Tensor) -> torch.Tensor:
    """Node output with only this node quantized by `cfg` (its float input `x`, float output `y`)."""
    factory = QuantizerFactory()
    final, node.final_config = node.final_config, cfg
    try:
        weights = factory.weights(node)
        if weights and isinstance(x, torch.Tensor):
            layer = make_layer(node).to(y.device)
            q = {name: quantizer.to(y.device)(getattr(layer, name)) for name, quantizer in weights.items()}
            y = torch.func.functional_call(layer, q, (x,))
        act = factory.activation(node)
        return act.to(y.device)(y) if act is not None else y
    finally:
        node.final_config = final


@torch.no_grad()
def _deltas(configurable: Sequence[Node], inputs: List[Any], outputs: List[torch.Tensor]) -> List[List[torch.Tensor]]:
    return [[(_candidate_output(node, cfg, x, y) - y).detach() for cfg in node.candidates]
            for node, x, y in zip(configurable, inputs, outputs)]


def candidate_sensitivity(graph: Graph, configurable: Sequence[Node], data: Iterable[List[Any]],
                          cfg: MixedPrecisionQuantizationConfig, device: Any) -> List[List[float]]:
    """sensitivity[i][c]: expected weighted distance at the interest points when node i alone takes
    candidate c, on the first ``cfg.num_of_images`` images of `data`."""
    _check_supported(cfg)
    points = _interest_points(graph, configurable, cfg)
    tracked = [n.name for n in configurable]
    single_input = [n.kind == NodeKind.MODULE and len(n.inputs) == 1 for n in configurable]
    input_names = [n.inputs[0] if single else n.name for n, single in zip(configurable, single_input)]
    observed = list(dict.fromkeys(tracked + points + input_names))
    model = build_module(graph, None, extra_outputs=observed).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    for m in model.modules():  # an in-place activation would overwrite the observed tensors (and their grads)
        if getattr(m, "inplace", False) is True:
            m.inplace = False
    totals = [[0.0] * len(n.candidates) for n in configurable]
    seen, weights = 0, None
    generator = torch.Generator().manual_seed(0)
    for batch in data:
        if seen >= cfg.num_of_images:
            break
        take = min(len(batch[0]), cfg.num_of_images - seen)
        xs = [t[:take].to(device).float().requires_grad_(True) if isinstance(t, torch.Tensor) else t for t in batch]
        _, tensors = model(*xs)
        by_name = dict(zip(observed, tensors))
        ys = [by_name[n] for n in tracked]
        inputs = [by_name[name] if single else None for name, single in zip(input_names, single_input)]
        deltas = _deltas(configurable, inputs, ys)
        if weights is None:
            weights = _point_weights(points, by_name)
        for _ in range(PROBE_ROUNDS):
            loss = sum((torch.randn(by_name[p].shape, generator=generator).to(by_name[p].device) *
                        math.sqrt(w) * by_name[p]).sum() for p, w in weights.items())
            grads = torch.autograd.grad(loss, ys, retain_graph=True, allow_unused=True)
            for i, g in enumerate(grads):
                if g is None:
                    continue
                for c, d in enumerate(deltas[i]):
                    totals[i][c] += float(((g * d).flatten(1).sum(1) ** 2).sum())
        seen += take
    scale = 1.0 / (max(seen, 1) * PROBE_ROUNDS)
    return _normalise([[t * scale for t in row] for row in totals], configurable, cfg)


def _point_weights(points: List[str], tensors: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """w_p / E|Y_p|^2 for every interest point: equal weights, each distance relative to the point's
    energy (taken on the first batch)."""
    energy = {p: float((tensors[p].detach() ** 2).flatten(1).sum(1).mean()) + 1e-12 for p in points}
    return {p: 1.0 / (len(points) * energy[p]) for p in points}


def _normalise(scores: List[List[float]], configurable: Sequence[Node], cfg) -> List[List[float]]:
    if cfg.metric_normalization == MpMetricNormalization.NONE:
        return scores
    out = []
    for row, node in zip(scores, configurable):
        bits = [sum(c.bit_widths()[1].values()) + (c.bit_widths()[0] or 0) for c in node.candidates]
        ref = row[bits.index(max(bits) if cfg.metric_normalization == MpMetricNormalization.MAXBIT else min(bits))]
        out.append([v / (ref + (cfg.metric_epsilon or 0.0)) for v in row])
    return out
