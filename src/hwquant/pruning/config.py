"""MCT 2.6.1's pruning configuration: PruningConfig, ImportanceMetric, ChannelsFilteringStrategy, PruningInfo
(same names, values and defaults), validated when built."""
from __future__ import annotations

from enum import Enum
from typing import Any, Dict

import numpy as np

from hwquant.errors import InvalidConfigError

# MCT's default number of Hessian approximations per channel score
NUM_SCORE_APPROXIMATIONS = 32


class ImportanceMetric(Enum):
    """How a channel's importance is scored: LFH, the label-free Hessian estimate (MCT's only one)."""
    LFH = 0


class ChannelsFilteringStrategy(Enum):
    """How channels are chosen for removal: GREEDY, the least important groups first until the target holds."""
    GREEDY = 0


class PruningConfig:
    """``num_score_approximations`` (Hessian probes per score), ``importance_metric``, ``channels_filtering_strategy``."""

    def __init__(self, num_score_approximations: int = NUM_SCORE_APPROXIMATIONS,
                 importance_metric: ImportanceMetric = ImportanceMetric.LFH,
                 channels_filtering_strategy: ChannelsFilteringStrategy = ChannelsFilteringStrategy.GREEDY):
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


class PruningInfo:
    """What pruning did, per layer: ``pruning_masks`` (1: channel kept, 0: removed) and ``importance_scores``."""

    def __init__(self, pruning_masks: Dict[Any, np.ndarray], importance_scores: Dict[Any, np.ndarray]):
        self._pruning_masks = dict(pruning_masks)
        self._importance_scores = dict(importance_scores)

    @property
    def pruning_masks(self) -> Dict[Any, np.ndarray]:
        return self._pruning_masks

    @property
    def importance_scores(self) -> Dict[Any, np.ndarray]:
        return self._importance_scores
