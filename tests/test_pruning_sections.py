"""mct.pruning's configuration (MCT 2.6.1's names) and the framework-free analysis of what can be pruned,
tested once on every back end present (tests/backend_kit.py). Issue 31 is in progress: the facades come next."""
import numpy as np
import pytest

import hwquant as mct
from hwquant.errors import InvalidConfigError
from hwquant.pruning import ChannelsFilteringStrategy, ImportanceMetric, PruningConfig, PruningInfo
from hwquant.pruning.sections import prunable_sections

IN_SHAPE = (3, 10, 10)


def _sections(kit, specs, **qc):
    model = kit.model(IN_SHAPE, specs)
    state = kit.state(model, kit.batches(IN_SHAPE, n=1, batch=4), **qc)
    return state.graph, prunable_sections(state.graph, state.adapter)


def test_a_chain_of_convolutions_is_prunable_up_to_the_output(kit):
    graph, (sections, refused) = _sections(kit, [("conv", 8, 3), ("bn",), ("relu",), ("conv", 16, 3), ("relu",),
                                                 ("conv", 4, 1)])
    kernels = [n.name for n in graph if n.weights and len(np.shape(next(iter(n.weights.values())))) == 4]
    assert [(s.entry, s.exit) for s in sections] == [(kernels[0], kernels[1]), (kernels[1], kernels[2])]
    assert all(len(s.channel_wise) == 1 for s in sections)  # the ReLU (the batch norm is folded into its convolution)
    assert list(refused) == [kernels[2]] and "model output" in refused[kernels[2]]


def test_a_residual_add_ties_its_channels(kit):
    # (kept as an add: residual collapsing would fold it into its convolution)
    graph, (sections, refused) = _sections(kit, [("conv", 8, 3), ("relu",), ("residual", 3), ("relu",),
                                                 ("conv", 4, 1)], residual_collapsing=False)
    tied = [why for why in refused.values() if "read by 2 layers" in why or "combines" in why]
    assert len(tied) == 2, refused  # the first convolution's ReLU feeds the add too; the residual convolution
    assert sections == []  # and the last convolution is the model's output


def test_mcts_configuration_names():
    config = PruningConfig()
    assert (config.num_score_approximations, config.importance_metric, config.channels_filtering_strategy) == \
        (32, ImportanceMetric.LFH, ChannelsFilteringStrategy.GREEDY)
    assert ImportanceMetric.LFH.value == 0 and ChannelsFilteringStrategy.GREEDY.value == 0
    assert mct.pruning.PruningConfig is PruningConfig
    info = PruningInfo({"a": np.array([1, 0])}, {"a": np.array([0.5, 0.1])})
    assert info.pruning_masks["a"].tolist() == [1, 0] and info.importance_scores["a"][0] == 0.5
    with pytest.raises(InvalidConfigError, match="num_score_approximations"):
        PruningConfig(num_score_approximations=0)
    with pytest.raises(InvalidConfigError, match="importance_metric"):
        PruningConfig(importance_metric="LFH")
