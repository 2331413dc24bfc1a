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


class _Additive:
    """A weights count where each channel of a section costs the same (the greedy choice's contract)."""

    def __init__(self, per_channel, rest=0.0):
        self.per_channel, self.rest = per_channel, rest

    def total(self, kept):
        return self.rest + sum(c * k for c, k in zip(self.per_channel, kept))

    def saving(self, kept, section, new):
        return self.per_channel[section] * (kept[section] - new)


def test_weights_counted_exactly_and_greedy_groups(kit):
    from hwquant.pruning.selection import WeightsCount, greedy_kept_groups, simd_groups
    graph, (sections, _) = _sections(kit, [("conv", 8, 3), ("relu",), ("conv", 16, 3), ("relu",), ("conv", 4, 1)])
    count = WeightsCount(graph, kit.adapter(graph), sections, {}, pad_to_simd=False)
    # 3x3 convolutions 3 -> 8 -> 16 with biases, then 1x1 16 -> 4: the middle one loses inputs and outputs at once
    assert count.total([8, 16]) == (27 * 8 + 8) + (9 * 8 * 16 + 16) + (16 * 4 + 4)
    assert count.total([4, 8]) == (27 * 4 + 4) + (9 * 4 * 8 + 8) + (8 * 4 + 4)
    assert count.saving([8, 16], 0, 4) == (27 + 1) * 4 + 9 * 4 * 16
    padded = WeightsCount(graph, kit.adapter(graph), sections, {n.name: 32 for n in graph}, pad_to_simd=True)
    assert padded.total([8, 16]) == 32 * (28 + 9 * 8 + 1 + 17)  # every layer's outputs padded to 32 channels
    scores = np.array([0.1, 5.0, 3.0, 0.2, 4.0])
    assert [g.tolist() for g in simd_groups(scores, 2)] == [[1, 4], [2, 3], [0]]
    # two sections of three groups: the least important per weight go first, each keeps one group
    kept = greedy_kept_groups([np.array([9.0, 1.0, 0.5]), np.array([8.0, 6.0, 0.1])], [np.ones(3), np.ones(3)],
                              _Additive([10.0, 10.0], rest=40.0), target_params=75.0)
    assert kept == [1, 2]  # removed in turn: b's 0.1, a's 0.5, a's 1.0 (b's 6.0 stays): 70 left
    # an overshoot is filled back: b's two cheap groups go first, then a's costly one passes the target by one
    # weight: b's better group fits again
    kept = greedy_kept_groups([np.array([9.0, 0.05]), np.array([9.0, 0.001, 0.0001])], [np.ones(2), np.ones(3)],
                              _Additive([10.0, 1.0]), target_params=12.0)
    assert kept == [1, 2]
    # a layer may be told to keep a share of its groups: the choice then takes from the other
    kept = greedy_kept_groups([np.array([9.0, 1.0, 0.5]), np.array([8.0, 6.0, 0.1])], [np.ones(3), np.ones(3)],
                              _Additive([10.0, 10.0], rest=40.0), target_params=75.0, least_kept=[2, 1])
    assert kept == [2, 1]
