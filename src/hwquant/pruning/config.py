"""MCT 2.6.1's pruning configuration: PruningConfig, ImportanceMetric, ChannelsFilteringStrategy, PruningInfo
(same names, values and defaults), validated when built; hwquant adds a data-free MAGNITUDE metric and
says in PruningInfo what the run did (memory before / after, what was kept whole and why)."""
from __future__ import annotations

from enum import Enum
from typing import Any, Dict, Optional

import numpy as np

from hwquant.errors import InvalidConfigError

# MCT's default number of images the Hessian scores are averaged over
NUM_SCORE_APPROXIMATIONS = 32


class ImportanceMetric(Enum):
    """How a channel's importance is scored: LFH, the label-free Hessian estimate (MCT's); MAGNITUDE, the
    squared L2 norm of the channel's weights (hwquant's: no data, no gradients)."""
    LFH = 0
    MAGNITUDE = 1


class ChannelsFilteringStrategy(Enum):
    """How channels are chosen for removal: GREEDY, the least important groups first until the target holds."""
    GREEDY = 0


class PruningConfig:
    """``num_score_approximations`` (images the scores average over), ``importance_metric``,
    ``channels_filtering_strategy``; hwquant's ``mean_replacement`` (keyword only, default True): the removed
    channels' mean contribution over the representative data is added to the bias of the layer that read them,
    so the pruned model starts closer to the float one (MCT drops them: False)."""

    def __init__(self, num_score_approximations: int = NUM_SCORE_APPROXIMATIONS,
                 importance_metric: ImportanceMetric = ImportanceMetric.LFH,
                 channels_filtering_strategy: ChannelsFilteringStrategy = ChannelsFilteringStrategy.GREEDY, *,
                 mean_replacement: bool = True):
        if not isinstance(mean_replacement, bool):
            raise InvalidConfigError(f"PruningConfig.mean_replacement must be True or False, got {mean_replacement!r}")
        self.mean_replacement = mean_replacement
        if isinstance(num_score_approximations, bool) or not isinstance(num_score_approximations, int) \
                or num_score_approximations < 1:
            raise InvalidConfigError(f"PruningConfig.num_score_approximations must be an int >= 1, got "
                                     f"{num_score_approximations!r}")
        if not isinstance(importance_metric, ImportanceMetric):
            raise InvalidConfigError(f"PruningConfig.importance_metric must be an ImportanceMetric "
                                     f"({', '.join(m.name for m in ImportanceMetric)}), got {importance_metric!r}")
        if not isinstance(channels_filtering_strategy, ChannelsFilteringStrategy):
            raise InvalidConfigError("PruningConfig.channels_filtering_strategy must be a ChannelsFilteringStrategy "
                                     f"({', '.join(m.name for m in ChannelsFilteringStrategy)}), got "
                                     f"{channels_filtering_strategy!r}")
        self.num_score_approximations = num_score_approximations
        self.importance_metric = importance_metric
        self.channels_filtering_strategy = channels_filtering_strategy


class PrunedLayer(str):
    """A key of PruningInfo: the layer's name, which is also its ``.name`` (MCT's keys are graph nodes)."""

    @property
    def name(self) -> str:
        return str(self)


class PruningInfo:
    """What pruning did, per entry layer: ``pruning_masks`` (1: output channel kept, 0: removed) and
    ``importance_scores`` (each channel's SIMD group's score). Also: ``weights_memory_before`` / ``_after`` and
    ``target_weights_memory`` (bytes of float32 weights, SIMD padding counted as the TPC says), ``kept_whole``
    ({layer: why its channels could not be pruned}), ``importance_metric``, ``measured_output_errors`` ({least
    share of each layer's groups kept: the relative output error that choice gave}, where choices differed)."""

    def __init__(self, pruning_masks: Dict[Any, np.ndarray], importance_scores: Dict[Any, np.ndarray],
                 weights_memory_before: Optional[float] = None, weights_memory_after: Optional[float] = None,
                 target_weights_memory: Optional[float] = None, kept_whole: Optional[Dict[str, str]] = None,
                 importance_metric: Optional[ImportanceMetric] = None,
                 measured_output_errors: Optional[Dict[float, float]] = None):
        self._pruning_masks = dict(pruning_masks)
        self._importance_scores = dict(importance_scores)
        self.weights_memory_before = weights_memory_before
        self.weights_memory_after = weights_memory_after
        self.target_weights_memory = target_weights_memory
        self.kept_whole = dict(kept_whole or {})
        self.importance_metric = importance_metric
        self.measured_output_errors = dict(measured_output_errors or {})

    @property
    def pruning_masks(self) -> Dict[Any, np.ndarray]:
        return self._pruning_masks

    @property
    def importance_scores(self) -> Dict[Any, np.ndarray]:
        return self._importance_scores

    def __repr__(self) -> str:
        pruned = sum(int(m.size - m.sum()) for m in self._pruning_masks.values())
        return (f"PruningInfo({len(self._pruning_masks)} layers, {pruned} channels removed, weights memory "
                f"{self.weights_memory_before} -> {self.weights_memory_after} bytes)")
