"""Structured pruning, the order of work, written once (the frameworks give a small back end): find the
sections, count the weights, score the channels, choose the SIMD groups to remove under the weights-memory
target, rebuild the graph with fewer channels, and say what was done and what was left whole."""
from __future__ import annotations

import copy
import logging
import math
from typing import Any, Dict, List, Optional, Protocol, Tuple

import numpy as np

from hwquant.core.pipeline.candidates import assign_candidates
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization
from hwquant.core.graph.model_graph import Graph
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.errors import InvalidConfigError
from hwquant.pruning import importance as imp
from hwquant.pruning.config import ImportanceMetric, PruningConfig, PruningInfo, PrunedLayer
from hwquant.pruning.rebuild import prune_section, removed_inputs_shift
from hwquant.pruning.sections import Section, prunable_sections
from hwquant.pruning.selection import FLOAT32_BYTES, UnreachableTarget, WeightsCount, greedy_kept_groups, simd_groups

log = logging.getLogger("hwquant.pruning")


class PruningBackend(imp.GradientBackend, Protocol):
    """What pruning needs from a framework: the captured float graph (batch norms not folded), its adapter and
    the TPC; the gradients of the LFH metric (imp.GradientBackend); the model built back from a graph."""
    graph: Graph
    adapter: Any
    tpc: Any

    def build(self, graph: Graph) -> Any:
        """The float model of ``graph``, its weights trainable (ready to fine-tune)."""


def check_arguments(target: Any, config: Any) -> None:
    if not isinstance(target, ResourceUtilization):
        raise InvalidConfigError("target_resource_utilization must be a mct.core.ResourceUtilization, got "
                                 f"{type(target).__name__}")
    if not math.isfinite(target.weights_memory):
        raise InvalidConfigError("pruning needs a weights-memory target: pass ResourceUtilization(weights_memory=N) "
                                 "with N in bytes of float32 weights (4 per parameter), e.g. 4 * 0.5 * the model's "
                                 "parameter count for half the weights")
    if not isinstance(config, PruningConfig):
        raise InvalidConfigError(f"pruning_config must be a mct.pruning.PruningConfig, got {type(config).__name__}")


def _simd_of(node: Any) -> int:
    """The smallest SIMD width of the node's TPC options (MCT's rule); 1 where the TPC gives none."""
    widths = [c.weights_quantization_cfg.simd_size for c in node.candidates
              if getattr(c.weights_quantization_cfg, "simd_size", None)]
    return int(min(widths)) if widths else 1


def prune(backend: PruningBackend, target: ResourceUtilization, config: PruningConfig) -> Tuple[Optional[Graph], PruningInfo]:
    """(the pruned graph, or None when the model already meets the target; what was done)."""
    graph, adapter = backend.graph, backend.adapter
    fqc = adapter.attach(backend.tpc)
    assign_candidates(graph, fqc, CoreConfig(), adapter)  # operator sets and SIMD widths
    sections, kept_whole = prunable_sections(graph, adapter)
    simd = {node.name: _simd_of(node) for node in graph}
    count = WeightsCount(graph, adapter, sections, simd, bool(getattr(backend.tpc, "is_simd_padding", False)))
    full = [s.channels for s in sections]
    before = count.total(full) * FLOAT32_BYTES
    target_bytes = float(target.weights_memory)
    ignored = sorted(str(t) for t in target.get_restricted_targets() if "WEIGHTS" not in str(t).upper())
    if ignored:
        log.warning("pruning meets the weights-memory target only; %s ignored (use mixed precision on the pruned "
                    "model for those)", ", ".join(ignored))
    facts: Dict[str, Any] = dict(weights_memory_before=before, target_weights_memory=target_bytes,
                                 kept_whole=kept_whole, importance_metric=config.importance_metric)
    if before <= target_bytes:
        log.warning("the model's weights take %.0f bytes (float32), within the target's %.0f: nothing pruned, the "
                    "model is returned unchanged", before, target_bytes)
        return None, PruningInfo({PrunedLayer(s.entry): np.ones(s.channels) for s in sections}, {},
                                 weights_memory_after=before, **facts)
    if not sections:
        reasons = "; ".join(f"{k}: {v}" for k, v in list(kept_whole.items())[:6]) or "the model has no kernel layer"
        raise InvalidConfigError(f"nothing in the model can be pruned ({reasons}). Pruning removes output channels of "
                                 "a convolution or dense layer that one other convolution or dense layer reads (through "
                                 "batch norms, activations, pooling, a flatten)")
    floor = count.total([min(simd[s.entry], s.channels) for s in sections]) * FLOAT32_BYTES
    if floor > target_bytes:
        raise InvalidConfigError(
            f"target weights memory {target_bytes:.0f} bytes cannot be reached by pruning: the smallest model it can "
            f"make takes {floor:.0f} bytes (every prunable layer down to one SIMD group of channels; "
            f"{len(kept_whole)} layer(s) kept whole: {', '.join(list(kept_whole)[:5])}). Ask for at least that, "
            "or quantize the weights too (mixed precision)")
    groups_of, scores_of = _score(backend, sections, simd, config)
    means = _exit_input_means(backend, sections) if config.mean_replacement else {}
    kept_groups, measured = _measured_choice(backend, sections, groups_of, scores_of, count,
                                             target_bytes / FLOAT32_BYTES, means)
    masks = _masks(sections, groups_of, kept_groups)
    scores = {PrunedLayer(s.entry): imp.unroll(groups_of[s.entry], scores_of[s.entry], s.channels) for s in sections}
    _apply(graph, adapter, sections, masks, means, log_it=True)
    kept_channels = [int(m.sum()) for m in masks.values()]
    after = count.total(kept_channels) * FLOAT32_BYTES
    _log_result(sections, kept_channels, before, after, target_bytes, kept_whole)
    return graph, PruningInfo(masks, scores, weights_memory_after=after, measured_output_errors=measured, **facts)


def _score(backend: PruningBackend, sections: List[Section], simd: Dict[str, int],
           config: PruningConfig) -> Tuple[Dict[str, List[np.ndarray]], Dict[str, np.ndarray]]:
    """Per entry layer: its SIMD groups (most important first) and their scores."""
    adapter, graph = backend.adapter, backend.graph
    kernels = imp.section_kernels(graph, adapter, sections)
    out_axes = {e: adapter.kernel_axes(graph.node(e))[0] for e in kernels}
    traces: Dict[str, Any] = {e: None for e in kernels}
    if config.importance_metric == ImportanceMetric.LFH:
        traces = imp.lfh_traces(backend, kernels, out_axes, config.num_score_approximations)
    groups_of, scores_of = {}, {}
    for e, kernel in kernels.items():
        channel = imp.channel_scores(kernel, out_axes[e], traces[e])
        groups_of[e] = simd_groups(channel, simd[e])
        scores_of[e] = imp.group_scores(kernel, out_axes[e], groups_of[e], traces[e])
    return groups_of, scores_of


# The greedy choice trusts each channel's score alone; removing most of one layer costs more than its channels'
# scores add up to. So the choice is made again with each layer keeping at least a share of its groups, and the
# candidate whose pruned model's output is closest to the float model's on the representative data is taken.
LEAST_KEPT_SHARES = (0.0, 0.25, 0.5)
MEASURED_SAMPLES = 32   # images the candidates' output errors are measured on
MEAN_SAMPLES = 64       # images the channel means of mean replacement average over


def _measured_choice(backend: PruningBackend, sections: List[Section], groups_of: Dict[str, List[np.ndarray]],
                     scores_of: Dict[str, np.ndarray], count: WeightsCount,
                     target_params: float, means: Dict[str, np.ndarray]) -> Tuple[List[int], Dict[float, float]]:
    """(groups kept per section, {least-kept share: measured relative output error})."""
    sizes = [np.array([len(g) for g in groups_of[s.entry]]) for s in sections]
    candidates: Dict[float, List[int]] = {}
    for share in LEAST_KEPT_SHARES:
        least = [int(np.ceil(share * len(groups_of[s.entry]))) for s in sections]
        try:
            kept = greedy_kept_groups([scores_of[s.entry] for s in sections], sizes, count, target_params, least)
        except UnreachableTarget:  # (a share too large for the target; share 0 is reachable: prune checked the floor)
            continue
        if kept not in candidates.values():
            candidates[share] = kept
    if len(candidates) == 1:
        return next(iter(candidates.values())), {}
    reference = backend.adapter.build(backend.graph, quantized=False)
    models = []
    for kept in candidates.values():
        graph = copy.deepcopy(backend.graph)
        _apply(graph, backend.adapter, sections, _masks(sections, groups_of, kept), means, log_it=False)
        models.append(backend.adapter.build(graph, quantized=False))
    errors = backend.adapter.relative_output_errors(reference, models, backend.data, MEASURED_SAMPLES)
    measured = dict(zip(candidates, (float(e) for e in errors)))
    best = min(measured, key=measured.__getitem__)
    log.info("pruning choices measured (least share of each layer kept: relative output error): %s; taken: %s",
             ", ".join(f"{k:.0%}: {v:.3g}" for k, v in measured.items()), f"{best:.0%}")
    return candidates[best], measured


def _masks(sections: List[Section], groups_of: Dict[str, List[np.ndarray]],
           kept_groups: List[int]) -> Dict[PrunedLayer, np.ndarray]:
    """Per entry layer, 1 for each output channel its kept groups (the most important first) hold, 0 else."""
    masks = {}
    for section, n_kept in zip(sections, kept_groups):
        mask = np.zeros(section.channels)
        mask[np.concatenate(groups_of[section.entry][:n_kept])] = 1
        masks[PrunedLayer(section.entry)] = mask
    return masks


def _apply(graph: Graph, adapter: Any, sections: List[Section], masks: Dict[PrunedLayer, np.ndarray],
           means: Dict[str, np.ndarray], log_it: bool) -> None:
    """Remove the masked-out channels from ``graph``; ``means``: the exit inputs' channel means on the unpruned
    model (mean replacement; empty: none)."""
    compensated: List[str] = []
    uncompensated: List[str] = []
    for section in sections:
        kept = np.flatnonzero(masks[PrunedLayer(section.entry)])
        if len(kept) == section.channels:
            continue
        shift = None
        if section.exit_input in means:
            shift = removed_inputs_shift(graph, adapter, section, kept, means[section.exit_input])
            shift, folded = _fold_into_batch_norm(graph, adapter, section, shift)
            (compensated if folded or shift is not None else uncompensated).append(section.exit)
        prune_section(graph, adapter, section, kept, shift)
    if compensated and log_it:
        log.info("the removed channels' mean contributions were folded into the biases (or the following batch "
                 "norms) of %s; PruningConfig(mean_replacement=False) drops them, as MCT", ", ".join(compensated))
    if uncompensated and log_it:
        log.info("no bias or batch norm to fold the removed channels' mean contribution into: %s",
                 ", ".join(uncompensated))


def _fold_into_batch_norm(graph: Graph, adapter: Any, section: Section,
                          shift: np.ndarray) -> Tuple[Optional[np.ndarray], bool]:
    """(the shift to add to the exit's bias, or None; whether the batch norm reading the exit took it instead).
    An exit with a bias takes it there; one without, read only by a batch norm, has that norm's mean lowered by
    it (the same function, no new weight); else it is dropped (None, False)."""
    exit_ = graph.node(section.exit)
    if adapter.bias_attr(exit_) in exit_.weights:
        return shift, False
    readers = graph.successors(exit_)
    norm = adapter.batch_norm_params(readers[0]) if len(readers) == 1 and not graph.is_output(exit_) \
        and readers[0].inputs == [exit_.name] else None
    if norm is None:
        return None, False
    key = next(k for k, w in readers[0].weights.items() if w is norm.mean)  # (the adapter hands out the array)
    readers[0].weights[key] = (np.asarray(norm.mean, np.float64) - shift).astype(np.asarray(norm.mean).dtype)
    return None, True


def _first_samples(data: Any, n: int) -> Any:
    """The representative batches until ``n`` samples are given (whole batches)."""
    given = 0
    for batch in data:
        if given >= n:
            return
        yield batch
        given += len(batch[0])


def _exit_input_means(backend: PruningBackend, sections: List[Section]) -> Dict[str, np.ndarray]:
    """Per section, the mean of each channel (or feature) the exit layer reads, over the representative data."""
    statistics = {s.exit_input: TensorStatistics(channel_axis=s.exit_axis, per_channel=True) for s in sections}
    if statistics:
        backend.adapter.collect_statistics(backend.graph, statistics, _first_samples(backend.data, MEAN_SAMPLES))
    return {name: stats.channel_mean for name, stats in statistics.items()}


def _log_result(sections: List[Section], kept: List[int], before: float, after: float, target: float,
                kept_whole: Dict[str, str]) -> None:
    pruned = [f"{s.entry} {s.channels}->{k}" for s, k in zip(sections, kept) if k < s.channels]
    log.info("pruned %d of %d prunable layers: weights memory %.0f -> %.0f bytes (target %.0f): %s",
             len(pruned), len(sections), before, after, target, ", ".join(pruned))
    if kept_whole:
        log.info("kept whole (%d): %s", len(kept_whole), "; ".join(f"{k}: {v}" for k, v in kept_whole.items()))
