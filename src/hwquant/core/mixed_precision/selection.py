"""Mixed precision: choose each configurable node's candidate under the resource targets.

    targets met by the largest candidates everywhere -> those candidates, no search (MCT's choice)
    a target below its minimum       -> InvalidConfigError with every target's minimum (with no choice
                                        left to any node, the fixed figures: checked all the same)
    configuration_overwrite          -> that choice (checked against the candidates)
    otherwise                        -> sensitivities (framework adapter, made monotone in bits), integer
                                        program, refinement

A target on one side only (weights or activations) first narrows the other side to its base bits
(`keep_base_bits`): the largest candidates are then the largest of the restricted side.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional

from hwquant.core.configuration.config import RU_FIELDS, MixedPrecisionQuantizationConfig, ResourceUtilization, RUTarget
from hwquant.core.graph.framework_adapter import FrameworkAdapter
from hwquant.core.graph.model_graph import Graph
from hwquant.core.mixed_precision.measurement import candidate_sensitivity
from hwquant.core.mixed_precision.resources import ResourceModel
from hwquant.core.mixed_precision.search import fits, minimum, monotone, refine, search
from hwquant.core.pipeline.state import MixedPrecisionResult
from hwquant.core.pipeline.resource_utilization import max_bits_config
from hwquant.errors import InvalidConfigError

log = logging.getLogger("hwquant.mixed_precision")
_UNIT = {RUTarget.WEIGHTS: "bytes", RUTarget.ACTIVATION: "bytes", RUTarget.TOTAL: "bytes", RUTarget.BOPS: "bit-operations"}


def _unreachable(targets: Dict[RUTarget, float], minima: Dict[RUTarget, float], jointly: bool,
                 no_choice: bool = False) -> InvalidConfigError:
    lines = [f"{RU_FIELDS[t]}={targets[t]:.6g} {_UNIT[t]} (smallest reachable: {minima[t]:.6g})" for t in targets]
    if jointly:
        what = "no choice of candidates meets these targets together, though each alone is reachable"
    elif no_choice:
        what = ("the resource target is below what the model reaches: the TPC's options leave no layer a choice "
                "of bit widths for it, so the figure is fixed")
    else:
        what = "the resource target is below what the smallest candidates reach"
    return InvalidConfigError(f"{what}: {'; '.join(lines)}. Raise the target(s), or allow fewer bits in the "
                              "TPC's options (mixed-precision candidates)")


def select_mixed_precision(graph: Graph, adapter: FrameworkAdapter, mp: MixedPrecisionQuantizationConfig,
                           target: ResourceUtilization, data_for_sensitivity: Any) -> Optional[MixedPrecisionResult]:
    """Set the final config of every configurable node; returns the choice, its bit widths and figures
    (None when no node has a choice left)."""
    targets = target.get_resource_utilization_dict(restricted_only=True)
    keep_base_bits(graph, target, adapter.kernel_attr)
    configurable = [n for n in graph if len(n.candidates) > 1]
    model = ResourceModel(graph, configurable, adapter.kernel_axes, adapter.kernel_attr, adapter.is_zero_padding)
    if not configurable:  # nothing to choose: the figures are fixed, and a target below them is refused too
        fixed = model.figures([])
        if any(fixed[t] > limit for t, limit in targets.items()):
            raise _unreachable(targets, fixed, jointly=False, no_choice=True)
        return None
    top = [node.candidates.index(max_bits_config(node)) for node in configurable]
    minima = {}
    choice: Optional[List[int]]
    if mp.configuration_overwrite is not None:
        choice = _checked_overwrite(mp.configuration_overwrite, configurable)
    elif fits(model, top, targets):
        log.info("every target allows the largest candidates everywhere: those, no search")
        choice = top
    else:
        minima = {t: minimum(model, t) for t in targets}
        if any(minima[t][0] > limit for t, limit in targets.items()):
            raise _unreachable(targets, {t: m[0] for t, m in minima.items()}, jointly=False)
        scores = candidate_sensitivity(graph, configurable, data_for_sensitivity, mp, adapter.sensitivity_backend())
        sensitivity = monotone(model, scores)
        choice = search(model, sensitivity, targets)
        if choice is None:  # the solver gave up near a boundary: start from a smallest choice that fits
            choice = next((m[1] for m in minima.values() if fits(model, m[1], targets)), None)
            if choice is None:
                raise _unreachable(targets, {t: m[0] for t, m in minima.items()}, jointly=True)
        if mp.refine_mp_solution:
            choice = refine(model, choice, sensitivity, targets)
    for node, c in zip(configurable, choice):
        node.final_config = node.candidates[c].clone()
    return MixedPrecisionResult(choice, {n.name: n.candidates[c].bit_widths() for n, c in zip(configurable, choice)},
                                {t.name: v for t, v in model.figures(choice).items()})


def keep_base_bits(graph: Any, target: ResourceUtilization, kernel_attr: Any) -> None:
    """MCT's rule for a target on one side only: with only weights restricted, every activation keeps
    its base config's bit width (and with only activations restricted, every kernel): the search
    does not raise what nobody constrained. A total-memory or BOPs target involves both sides."""
    if target.total_mem_restricted() or target.bops_restricted() or \
            target.weight_restricted() == target.activation_restricted():
        return
    for node in graph:
        if len(node.candidates) < 2:
            continue
        base = node.candidates[0]
        bits: Callable[..., Any]
        if target.weight_restricted():
            bits = lambda c: c.activation_quantization_cfg.activation_n_bits  # noqa: E731
        else:
            attr = kernel_attr(node)
            if attr is None or attr not in base.weights_quantization_cfg.attrs:
                continue
            bits = lambda c, a=attr: c.weights_quantization_cfg.attrs[a].weights_n_bits  # noqa: E731
        node.candidates = [c for c in node.candidates if bits(c) == bits(base)]


def _checked_overwrite(overwrite: List[int], configurable: List[Any]) -> List[int]:
    if len(overwrite) != len(configurable):
        raise InvalidConfigError(f"configuration_overwrite has {len(overwrite)} entries but the model has "
                                 f"{len(configurable)} configurable nodes ({[n.name for n in configurable][:8]}...); "
                                 "give one candidate index per configurable node, in graph order")
    bad = [(n.name, c, len(n.candidates)) for n, c in zip(configurable, overwrite) if c >= len(n.candidates)]
    if bad:
        raise InvalidConfigError(f"configuration_overwrite: candidate index out of range at {bad[:5]} "
                                 "(node, index, number of candidates)")
    return list(overwrite)
