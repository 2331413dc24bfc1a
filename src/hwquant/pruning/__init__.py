"""`mct.pruning`: structured pruning for the target hardware. Written once (framework-free, in this package)
over a small back end per framework (hwquant.torch.pruning, hwquant.keras.pruning), whose facades load on
first use."""
from hwquant.lazy import lazy_table
from hwquant.pruning.config import ChannelsFilteringStrategy, ImportanceMetric, PruningConfig, PruningInfo  # noqa: F401

__getattr__, __dir__ = lazy_table("hwquant.pruning", {
    "pytorch_pruning_experimental": "hwquant.torch.pruning",
    "keras_pruning_experimental": "hwquant.keras.pruning",
}, globals())
