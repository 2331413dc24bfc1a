"""The mixed-precision sensitivity loop, written once for every framework: for each configurable node
and candidate, the distance between the float model and the quantized model where that node alone
takes that candidate (every other configurable node at its largest), at the interest points and the
outputs, combined by MCT's rules (sensitivity.py). As in MCT the figure is ``interest-point metric +
mean output distance``, distances being normalised squared errors (``|Y_q - Y|^2 / |Y|^2`` per sample,
averaged) unless the user gives ``compute_distance_fn``.

The framework gives primitives through a ``SensitivityBackend`` (torch/mixed_precision.py,
keras/mixed_precision.py): build the float and the quantized model once, put one node's candidate into
the built quantized model, measure the observed tensors' distances on one batch, estimate Hessian
traces. A back end may also offer a cheaper estimate of the same figure (PyTorch's gradient probes),
used where no measurement is required (``needs_measurement``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, Iterable, List, Optional, Sequence

from hwquant.core.configuration.config import MixedPrecisionQuantizationConfig, MpDistanceWeighting
from hwquant.core.pipeline.distributed import SINGLE_PROCESS, Collective, first_batches, gather_rows, my_share
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.mixed_precision.sensitivity import (combine_distances, compared_outputs, interest_points, needs_measurement,
                                                      normalise_scores)
from hwquant.core.pipeline.resource_utilization import max_bits_config


class SensitivityBackend(ABC):
    """A framework's primitives for the sensitivity loop. ``build`` comes first; the loop then calls
    ``set_candidate`` and ``distances`` in any order, and restores every node's largest candidate."""

    model: Any  # the built quantized model
    collective: Collective = SINGLE_PROCESS  # the processes of the run (a framework's back end sets its own)

    def images(self, data: Iterable[List[Any]], n: int) -> List[List[Any]]:
        """The first ``n`` samples of ``data`` (of every rank's data, in global order), as batches ready
        for the models."""
        batches, seen = [], 0
        for batch in first_batches(self.collective, data, n, "gathering the mixed-precision images"):
            if seen >= n:
                break
            take = min(len(batch[0]), n - seen)
            batches.append([self.ready(t, take) for t in batch])
            seen += take
        return batches

    def ready(self, t: Any, take: int) -> Any:
        """One input of a batch, cut to its first ``take`` samples, as the models take it."""
        return t[:take]

    @abstractmethod
    def build(self, graph: Graph, configurable: Sequence[Node], observed: Sequence[str],
              batches: List[List[Any]], cfg: MixedPrecisionQuantizationConfig) -> None:
        """Build the float model and the quantized model (every node at its ``final_config``, which the
        loop has set to the largest candidate for the configurable ones), both returning the ``observed``
        tensors; run the float model on ``batches`` as the reference (and anything a back end caches)."""

    @abstractmethod
    def set_candidate(self, node: Node, candidate: Any) -> None:
        """Put ``candidate``'s quantizers for ``node`` into the built quantized model (no rebuild)."""

    @abstractmethod
    def distances(self, batch_index: int) -> List[float]:
        """The quantized model as it now stands on batch ``batch_index``: for each observed tensor, the
        mean over samples of the distance to the float reference (``cfg.compute_distance_fn``, or the
        normalised squared error)."""

    def custom_metric(self, metric: Any) -> float:
        """``metric(quantized model)`` (MixedPrecisionQuantizationConfig.custom_metric_fn)."""
        return float(metric(self.model))

    @abstractmethod
    def hessian_traces(self, points: Sequence[str], outputs: Sequence[str]) -> Dict[str, float]:
        """Per interest point, the Gauss-Newton trace (per element) of the normalised output distance with
        respect to that tensor, on the float model and the batches given to ``build``."""

    def estimate(self, graph: Graph, configurable: Sequence[Node], batches: List[List[Any]],
                 cfg: MixedPrecisionQuantizationConfig, points: List[str],
                 outputs: List[str]) -> Optional[List[List[float]]]:
        """A cheaper estimate of the measured figures, or None (measure)."""
        return None


def candidate_sensitivity(graph: Graph, configurable: Sequence[Node], data: Iterable[List[Any]],
                          cfg: MixedPrecisionQuantizationConfig, backend: SensitivityBackend) -> List[List[float]]:
    """sensitivity[i][c] of configurable node i at candidate c, on the first ``cfg.num_of_images``
    samples of ``data``, normalised by MCT's rules. Across processes (``backend.collective``) every rank
    takes the same global images; the measured figures are split by node (each node's are independent of the others') and
    gathered; a back end's estimate may split its own work (PyTorch's probes: by batch)."""
    batches = backend.images(data, cfg.num_of_images)
    points, outputs = interest_points(graph, configurable, cfg), compared_outputs(graph)
    scores = None if needs_measurement(cfg) else backend.estimate(graph, configurable, batches, cfg, points, outputs)
    if scores is None:
        scores = _measured(graph, configurable, batches, cfg, backend, points, outputs)
    return normalise_scores(scores, configurable, cfg)


def _measured(graph: Graph, configurable: Sequence[Node], batches: List[List[Any]],
              cfg: MixedPrecisionQuantizationConfig, backend: SensitivityBackend, points: List[str],
              outputs: List[str]) -> List[List[float]]:
    collective = backend.collective
    observed = list(dict.fromkeys(points + outputs))
    finals = {n.name: n.final_config for n in configurable}
    mine = my_share(collective, len(configurable))  # (every node, with one process)
    try:
        for node in configurable:  # the baseline: every configurable node at its largest candidate
            node.final_config = max_bits_config(node)
        backend.build(graph, configurable, observed, batches, cfg)
        if cfg.custom_metric_fn is not None:
            return gather_rows(collective, {
                i: _each_candidate(backend, configurable[i], lambda: backend.custom_metric(cfg.custom_metric_fn))
                for i in mine}, len(configurable), "measuring mixed-precision candidates")
        hessian = backend.hessian_traces(points, outputs) \
            if cfg.distance_weighting_method == MpDistanceWeighting.HESSIAN and points else {}
        totals = {i: [dict.fromkeys(observed, 0.0) for _ in configurable[i].candidates] for i in mine}
        for k in range(len(batches)):  # batches outside: a back end may hold one batch's reference at a time
            for i, rows in totals.items():
                for dists, found in zip(rows, _each_candidate(backend, configurable[i], lambda k=k: backend.distances(k))):
                    for p, d in zip(observed, found):
                        dists[p] += d / len(batches)
        return gather_rows(collective, {
            i: [combine_distances(cfg, dists, points, outputs, hessian) for dists in rows] for i, rows in totals.items()
        }, len(configurable), "measuring mixed-precision candidates")
    finally:
        for node in configurable:
            node.final_config = finals[node.name]


def _each_candidate(backend: SensitivityBackend, node: Node, measure: Any) -> List[Any]:
    """``measure()`` with each of the node's candidates in the model; the largest one put back."""
    found = []
    for candidate in node.candidates:
        node.final_config = candidate
        backend.set_candidate(node, candidate)
        found.append(measure())
    node.final_config = max_bits_config(node)
    backend.set_candidate(node, node.final_config)
    return found
