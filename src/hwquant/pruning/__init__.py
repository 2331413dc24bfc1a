"""`mct.pruning`: structured pruning (issue 31, in progress): MCT 2.6.1's configuration names and the
framework-free analysis of what can be pruned. The facades (pytorch_pruning_experimental,
keras_pruning_experimental) are not there yet."""
from hwquant.pruning.config import ChannelsFilteringStrategy, ImportanceMetric, PruningConfig, PruningInfo  # noqa: F401
