"""mct.pruning's facades on every back end present (tests/backend_kit.py): a real smaller model, exact where
removed channels were zero, SIMD groups, the memory figures, LFH, fine-tune and PTQ after, and the bad inputs."""
import logging

import numpy as np
import pytest

import hwquant as mct
from hwquant.errors import InvalidConfigError
from hwquant.pruning import ImportanceMetric, PruningConfig

IN_SHAPE = (3, 8, 8)
TFLITE = {"target_platform_capabilities": mct.get_target_platform_capabilities("pytorch", "tflite")}
# no biases, no batch norms: a channel whose kernel is zero gives zeros all the way to the exit
ZERO_SAFE = [("conv", 16, 3, False), ("relu",), ("dwconv", 3, False), ("relu",), ("conv", 24, 3, False), ("relu",),
             ("maxpool",), ("flatten",), ("dense", 5)]


def _out(kit, model, x):
    return kit.run(model, x)


def test_removing_zero_channels_keeps_the_function_exactly(kit):
    model = kit.model(IN_SHAPE, ZERO_SAFE)
    kit.zero_channels(model, 0, range(0, 16, 2))   # half of the first convolution's channels
    kit.zero_channels(model, 1, range(12))         # half of the second's (read through the flatten)
    batches = kit.batches(IN_SHAPE, n=2, batch=4)
    before = kit.params(model)
    # the zero channels' weights: 8 * (27 + 9 + 9 * 24) in the first section, 12 * (9 * 16 + 16 * 5) in the second
    target = 4 * (before - 8 * (27 + 9 + 9 * 24) - 12 * (9 * 8 + 16 * 5))
    pruned, info = kit.prune(model, batches, target, pruning_config=PruningConfig(
        importance_metric=ImportanceMetric.MAGNITUDE), **TFLITE)
    masks = {k.name: m for k, m in info.pruning_masks.items()}
    assert [int(m.sum()) for m in masks.values()] == [8, 12]
    assert not np.any(list(masks.values())[0][::2]) and not np.any(list(masks.values())[1][:12])
    assert kit.params(pruned) * 4 == info.weights_memory_after <= target
    assert info.weights_memory_before == before * 4
    x = batches[0][0]
    np.testing.assert_allclose(_out(kit, pruned, x), _out(kit, model, x), rtol=1e-5, atol=1e-5)
    assert kit.params(model) == before  # the model passed is not changed


@pytest.mark.parametrize("mean_replacement", [True, False])
def test_mean_replacement_keeps_constant_channels_contribution(kit, mean_replacement):
    model = kit.model(IN_SHAPE, [("conv", 8, 3), ("relu",), ("conv", 4, 1)])
    kit.zero_channels(model, 0, range(4), bias=0.5)  # four channels constant 0.5: removing them is exact only if
    batches = kit.batches(IN_SHAPE, n=2, batch=4)    # their contribution stays in the next layer's bias
    pruned, info = kit.prune(model, batches, 4 * (8 * 28 + 36 - 4 * 28 - 4 * 4), pruning_config=PruningConfig(
        importance_metric=ImportanceMetric.MAGNITUDE, mean_replacement=mean_replacement), **TFLITE)
    assert [int(m.sum()) for m in info.pruning_masks.values()] == [4]
    x = batches[0][0]
    gap = np.abs(_out(kit, pruned, x) - _out(kit, model, x)).max()
    assert (gap < 1e-5) if mean_replacement else (gap > 0.01)


def test_lfh_prunes_in_simd_groups_with_batch_norms(kit, tmp_path):
    model = kit.model(IN_SHAPE, [("conv", 64, 3), ("bn",), ("relu",), ("dwconv", 3), ("bn",), ("relu",),
                                 ("conv", 32, 1), ("relu",), ("conv", 32, 1)])
    batches = kit.batches(IN_SHAPE, n=2, batch=4)
    before = kit.params(model)
    pruned, info = kit.prune(model, batches, 4 * 0.7 * before, pruning_config=PruningConfig(num_score_approximations=4))
    kept = {k.name: int(m.sum()) for k, m in info.pruning_masks.items()}
    assert all(k % 32 == 0 and k >= 32 for k in kept.values()), kept  # IMX500: SIMD groups of 32
    assert info.weights_memory_after <= 4 * 0.7 * before < info.weights_memory_before
    scores = list(info.importance_scores.values())[0]
    assert scores.shape == (64,) and np.all(scores >= 0) and len(np.unique(scores)) == 2  # one score per group
    x = batches[0][0]
    assert _out(kit, pruned, x).shape == _out(kit, model, x).shape
    assert kit.params(pruned) < before
    # the pruned model quantizes and exports as any model
    quantized, _ = kit.ptq(pruned, batches)
    np.testing.assert_allclose(kit.export_and_run(quantized, tmp_path, batches, x), kit.run(quantized, x),
                               rtol=1e-3, atol=1e-3)


def test_a_global_pooling_head_is_prunable(kit):
    """conv -> global average pooling -> dense (Keras' pooling drops the spatial axes, PyTorch's keeps them and a
    flatten follows): the convolution's channels are the dense layer's inputs."""
    if kit.name == "keras":
        keras = kit.keras
        x = inp = keras.Input((8, 8, 3))
        x = keras.layers.ReLU()(keras.layers.Conv2D(16, 3, padding="same")(x))
        model = keras.Model(inp, keras.layers.Dense(5)(keras.layers.GlobalAveragePooling2D()(x)))
    else:
        nn = kit.nn
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Linear(16, 5)).eval()
    batches = kit.batches(IN_SHAPE, n=1, batch=4)
    pruned, info = kit.prune(model, batches, 4 * (kit.params(model) - 4 * (28 + 5)), **TFLITE)
    assert [int(m.sum()) for m in info.pruning_masks.values()] == [12] and not info.kept_whole.get("conv2d")
    assert kit.run(pruned, batches[0][0]).shape == (4, 5)


@pytest.mark.parametrize("tpc", ["tflite", "qnnpack"])
def test_prelu_sections_whatever_the_tpc_defines(kit, tpc):
    """PReLU's per-channel slopes lose the same channels (MTCNN's nets); what kind of layer it is comes from the
    framework, not from the TPC (TFLite's defines no PReLU operator set)."""
    model = kit.model(IN_SHAPE, [("conv", 8, 3, False), ("prelu",), ("conv", 6, 3, False), ("prelu",), ("conv", 4, 1)])
    kit.zero_channels(model, 0, [1, 5])
    batches = kit.batches(IN_SHAPE, n=1, batch=4)
    pruned, info = kit.prune(model, batches, 4 * (kit.params(model) - 2 * (27 + 1 + 54)), pruning_config=PruningConfig(
        importance_metric=ImportanceMetric.MAGNITUDE), target_platform_capabilities=mct.get_target_platform_capabilities(
            "pytorch", tpc))
    assert [int(m.sum()) for m in info.pruning_masks.values()] == [6, 6]
    x = batches[0][0]
    np.testing.assert_allclose(_out(kit, pruned, x), _out(kit, model, x), rtol=1e-5, atol=1e-5)


def test_lfh_scores_a_dead_channel_lowest(kit):
    model = kit.model(IN_SHAPE, [("conv", 8, 3, False), ("relu",), ("conv", 8, 3), ("relu",), ("conv", 4, 1)])
    kit.zero_channels(model, 0, [3])
    kit.zero_channels(model, 1, [5])
    before = kit.params(model)
    _, info = kit.prune(model, kit.batches(IN_SHAPE, n=1, batch=8), 4 * (before - 40),
                        pruning_config=PruningConfig(num_score_approximations=8), **TFLITE)
    first, second = info.importance_scores.values()
    assert np.argmin(first) == 3 and np.argmin(second) == 5 and first[3] == 0 and second[5] == 0
    assert np.all(np.delete(first, 3) > 0)


def test_a_met_target_returns_the_model_unchanged(kit, caplog):
    model = kit.model(IN_SHAPE, [("conv", 8, 3), ("relu",), ("conv", 4, 1)])
    with caplog.at_level(logging.WARNING, logger="hwquant.pruning"):
        pruned, info = kit.prune(model, kit.batches(IN_SHAPE, n=1), 1e9)
    assert pruned is model and "nothing pruned" in caplog.text
    assert all(m.all() for m in info.pruning_masks.values())
    assert info.weights_memory_after == info.weights_memory_before


def test_an_unreachable_target_is_refused_with_the_smallest_figure(kit):
    model = kit.model(IN_SHAPE, [("conv", 64, 3), ("relu",), ("conv", 4, 1)])
    with pytest.raises(InvalidConfigError, match=r"cannot be reached by pruning: the smallest model it can make takes "
                                                 r"\d+ bytes"):
        kit.prune(model, kit.batches(IN_SHAPE, n=1), 100.0)


def test_nothing_prunable_is_said(kit):
    model = kit.model(IN_SHAPE, [("conv", 8, 3), ("relu",), ("residual", 3)])
    with pytest.raises(InvalidConfigError, match="nothing in the model can be pruned"):
        kit.prune(model, kit.batches(IN_SHAPE, n=1), 10.0, **TFLITE)


def test_bad_arguments(kit):
    model = kit.model(IN_SHAPE, [("conv", 8, 3), ("relu",), ("conv", 4, 1)])
    prune = getattr(mct.pruning, f"{kit.facade_prefix}_pruning_experimental")
    data = kit.data_gen(kit.batches(IN_SHAPE, n=1))
    with pytest.raises(InvalidConfigError, match="ResourceUtilization"):
        prune(model, 1000, data)
    with pytest.raises(InvalidConfigError, match="weights-memory target"):
        prune(model, mct.core.ResourceUtilization(activation_memory=10), data)
    with pytest.raises(InvalidConfigError, match="PruningConfig"):
        prune(model, mct.core.ResourceUtilization(weights_memory=10), data, pruning_config={"num": 3})


@pytest.mark.parametrize("flatten", ["view_size", "reshape", "view_constant"])
def test_pytorch_flatten_idioms(flatten):
    """x.view(x.size(0), -1) and x.reshape(x.shape[0], -1) are flattens (the feature count is left to -1); a view
    to a fixed feature count would break once channels are removed, so its layer is kept whole and said."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.fc = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.Conv2d(8, 6, 3, padding=1), \
                nn.Linear(6 * 64, 4)

        def forward(self, x):
            x = torch.relu(self.c2(torch.relu(self.c1(x))))
            if flatten == "view_size":
                return self.fc(x.view(x.size(0), -1))
            if flatten == "reshape":
                return self.fc(x.reshape(x.shape[0], -1))
            return self.fc(x.view(-1, 6 * 64))

    model = Net().eval()
    with torch.no_grad():
        model.c2.weight[[0, 3]] = 0.0
        model.c2.bias[[0, 3]] = -1.0  # dead after the ReLU: removing them is exact
    x = torch.randn(4, 3, 8, 8)
    before = sum(p.numel() for p in model.parameters())
    target = 4 * (before - 2 * (72 + 1 + 64 * 4))
    if flatten == "view_constant":
        with pytest.raises(InvalidConfigError, match="cannot be reached"):
            mct.pruning.pytorch_pruning_experimental(model, mct.core.ResourceUtilization(weights_memory=target),
                                                     lambda: iter([[x]]), PruningConfig(
                                                         importance_metric=ImportanceMetric.MAGNITUDE), **TFLITE)
        return
    pruned, info = mct.pruning.pytorch_pruning_experimental(
        model, mct.core.ResourceUtilization(weights_memory=target), lambda: iter([[x]]),
        PruningConfig(importance_metric=ImportanceMetric.MAGNITUDE), **TFLITE)
    assert int(info.pruning_masks["c2"].sum()) == 4
    with torch.no_grad():
        torch.testing.assert_close(pruned(x), model(x), rtol=1e-5, atol=1e-5)
