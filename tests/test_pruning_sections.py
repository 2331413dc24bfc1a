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


def test_channels_per_section_and_greedy_groups(kit):
    from hwquant.pruning.selection import greedy_kept_groups, magnitude_scores, params_per_channel, simd_groups
    graph, (sections, _) = _sections(kit, [("conv", 8, 3), ("relu",), ("conv", 16, 3), ("relu",), ("conv", 4, 1)])
    # 3x3 convolution 3 -> 8 with bias, then 3x3 convolution 8 -> 16: one of the 8 channels holds 27 + 1 + 16 * 9
    assert params_per_channel(graph, kit.adapter(graph), sections[0]) == 27 + 1 + 144
    scores = np.array([0.1, 5.0, 3.0, 0.2, 4.0])
    assert [g.tolist() for g in simd_groups(scores, 2)] == [[1, 4], [2, 3], [0]]
    assert magnitude_scores(np.array([[1.0, 2.0], [3.0, 0.0]]), 0).tolist() == [5.0, 9.0]
    # two sections of three groups: the least important per parameter go first, each keeps one group
    kept = greedy_kept_groups({"a": np.array([9.0, 1.0, 0.5]), "b": np.array([8.0, 6.0, 0.1])},
                              {"a": np.array([10.0, 10.0, 10.0]), "b": np.array([10.0, 10.0, 10.0])},
                              total_params=100.0, target_params=75.0)
    assert kept == {"a": 1, "b": 2}  # removed in turn: b's 0.1, a's 0.5, a's 1.0 (b's 6.0 stays): 70 left
    with pytest.raises(ValueError, match="smallest model"):
        greedy_kept_groups({"a": np.array([1.0, 1.0])}, {"a": np.array([10.0, 10.0])}, 30.0, 10.0)
