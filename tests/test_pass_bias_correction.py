"""Weights bias correction: the mean output error caused by kernel quantization is removed."""
import copy

import numpy as np
import pytest
import torch
from backend_kit import TorchKit
from torch import nn

from hwquant.core.numerics import quant_math
from hwquant.core.statistics.node_parameters import set_weights_params
from hwquant.core.passes.bias_correction import apply_bias_correction, bias_correction_inputs, output_mean_shift
from hwquant.torch.adapter import PytorchAdapter

torch.manual_seed(0)


_state = TorchKit().state  # (model, batches, **QuantizationConfig fields): calibrated, parameters computed


def _coarsen(node, bits=3):
    """Few kernel bits, per tensor: a large, biased quantization error."""
    wc = node.final_config.weights_quantization_cfg.attrs["weight"]
    wc.weights_n_bits, wc.weights_per_channel_threshold = bits, False
    set_weights_params(node.final_config, node.weights)


def _quantized_kernel(node):
    wc = node.final_config.weights_quantization_cfg.attrs["weight"]
    axis = wc.weights_channels_axis if wc.weights_per_channel_threshold else None
    return quant_math.fake_quantize_with(wc.weights_quantization_method, wc.weights_n_bits,
                                         wc.weights_quantization_params, node.weights["weight"], axis)


def _layer(node, weight, bias):
    layer = copy.deepcopy(node.call_target).eval()
    layer.weight = nn.Parameter(torch.as_tensor(np.asarray(weight, np.float32)))
    layer.bias = None if bias is None else nn.Parameter(torch.as_tensor(np.asarray(bias, np.float32)))
    return layer


def _mean_error(node, float_w, float_b, x):
    """Per-channel mean over the data of (quantized-kernel layer - float layer)."""
    with torch.no_grad():
        q = _layer(node, _quantized_kernel(node), node.weights.get("bias"))(x)
        f = _layer(node, float_w, float_b)(x)
    dims = [d for d in range(q.ndim) if d != 1]
    return (q - f).mean(dim=dims).numpy()


@pytest.mark.parametrize("layer, shape, exact", [
    (nn.Linear(6, 5), (64, 6), True),
    (nn.Linear(6, 5, bias=False), (64, 6), True),
    (nn.Conv2d(4, 6, 3), (8, 4, 7, 7), False),           # the windows see the borders less: not exact
    (nn.Conv2d(6, 6, 3, groups=6), (8, 6, 7, 7), False),
    (nn.Conv2d(4, 6, 3, groups=2, stride=2), (8, 4, 9, 9), False),
    (nn.ConvTranspose2d(4, 6, 2, stride=2), (8, 4, 5, 5), True),
    (nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2), (8, 4, 5, 5), True),
    (nn.Conv2d(4, 6, 3, padding=1), (8, 4, 15, 15), False)])
def test_mean_output_error_of_the_layer_vanishes(layer, shape, exact):
    torch.manual_seed(0)
    offsets = torch.linspace(-1.0, 3.0, shape[1]).reshape([1, -1] + [1] * (len(shape) - 2))
    batches = [[torch.randn(shape) + offsets] for _ in range(3)]
    state = _state(nn.Sequential(layer), batches)
    node = state.graph.node("_0")
    _coarsen(node)
    float_w, float_b = node.weights["weight"].copy(), node.weights.get("bias")
    x = torch.cat([b[0] for b in batches])
    before = _mean_error(node, float_w, float_b, x)
    assert np.abs(before).max() > 1e-2
    assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 1
    assert node.weights["bias"].shape == ((5,) if isinstance(layer, nn.Linear) else (6,))
    after = _mean_error(node, float_w, float_b, x)
    if exact:  # every input value meets every tap equally often
        assert np.abs(after).max() < 1e-4
    else:  # zero padding: border windows see zeros that the correction's input means do not hold
        padded = getattr(layer, "padding", (0,)) != (0, 0) and getattr(layer, "padding", (0,)) != (0,)
        assert np.abs(after).mean() < (0.3 if padded else 0.1) * np.abs(before).mean()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantized_model_mean_error_shrinks(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3)).eval()
    batches = [[torch.randn(32, 3, 9, 9) + 1.0] for _ in range(2)]
    x = torch.cat([b[0] for b in batches])
    errors = []
    for correct in (False, True):
        state = _state(copy.deepcopy(model), batches)
        for name in ("_0", "_2"):
            _coarsen(state.graph.node(name), bits=3)
        if correct:
            assert bias_correction_inputs(state.graph, state.adapter) == ["input_1", "_1"]
            assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 2
        with torch.no_grad():
            q = state.adapter.build(state.graph, quantized=True)(x)
        errors.append((q - model(x)).mean(dim=(0, 2, 3)).abs().mean().item())  # per-channel mean error
    assert errors[1] < 0.5 * errors[0]


def test_dense_layer_behind_flatten_needs_statistics_of_its_input():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 3 * 3, 2))
    state = _state(model, [[torch.randn(4, 3, 5, 5)]])
    assert "_2" in bias_correction_inputs(state.graph, state.adapter)
    assert "_2" in state.statistics  # calibration observes it although the flatten is not quantized
    assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 2  # the conv and the dense layer


def test_flag_off_and_missing_statistics_leave_the_bias_alone():
    batches = [[torch.randn(8, 6) + 1]]
    state = _state(nn.Sequential(nn.Linear(6, 5)), batches, weights_bias_correction=False)
    _coarsen(state.graph.node("_0"))
    bias = state.graph.node("_0").weights["bias"].copy()
    assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 0
    assert np.array_equal(state.graph.node("_0").weights["bias"], bias)
    # per-node switch (what a network-editor rule edits)
    state = _state(nn.Sequential(nn.Linear(6, 5)), batches)
    _coarsen(state.graph.node("_0"))
    state.graph.node("_0").final_config.weights_quantization_cfg.weights_bias_correction = False
    assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 0
    # a dense layer on a 3-D input: the statistics' channels (axis 1) are not its features
    state = _state(nn.Sequential(nn.Linear(6, 5)), [[torch.randn(4, 6, 6) + 1]])
    _coarsen(state.graph.node("_0"))
    assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 0
    # no statistics of the input
    state = _state(nn.Sequential(nn.Linear(6, 5)), batches)
    _coarsen(state.graph.node("_0"))
    state.statistics.clear()
    assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 0


def test_output_mean_shift_of_a_grouped_conv_reads_each_groups_channels():
    from hwquant.core.graph.framework_adapter import LinearGeometry
    err = np.zeros((4, 2, 1, 1))
    err[3, 1] = 1.0  # output 3 is in group 1 (channels 2, 3): it reads channel 3
    g = LinearGeometry("conv", 4, 4, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), groups=2)
    assert np.allclose(output_mean_shift(err, g, np.array([1.0, 2.0, 3.0, 4.0])), [0, 0, 0, 4.0])


@pytest.mark.parametrize("helps", [True, False])
def test_bias_correction_is_kept_only_where_it_lowers_the_output_error(helps, monkeypatch):
    from hwquant.core.pipeline.stages import bias_correction_where_it_helps

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1, bias=False)).eval()
    batches = [[torch.randn(4, 3, 8, 8) + 1.0] for _ in range(3)]
    state = _state(model, batches)
    for node in state.graph:
        if "weight" in node.weights:
            _coarsen(node)
    before = {n.name: copy.deepcopy(n.weights.get("bias")) for n in state.graph if "weight" in n.weights}
    seen = {}

    def judged(self, reference, models, data, max_samples):
        seen["models"] = len(models)
        return [2.0, 1.0] if helps else [1.0, 2.0]  # (without, with)
    monkeypatch.setattr(PytorchAdapter, "relative_output_errors", judged)
    corrected = bias_correction_where_it_helps(state, batches)
    assert seen["models"] == 2 and state.report.bias_correction_error == (
        {"without": 2.0, "with": 1.0} if helps else {"without": 1.0, "with": 2.0})
    assert corrected == (2 if helps else 0)
    for name, bias in before.items():
        now = state.graph.node(name).weights.get("bias")
        if helps:
            assert now is not None and (bias is None or not np.allclose(now, bias))
        else:  # undone: the same biases (a layer that had none keeps a zero one)
            np.testing.assert_array_equal(now, bias if bias is not None else np.zeros_like(now))


def test_bias_correction_judge_measures_real_output_errors():
    """End to end: the two errors are the relative output errors of the models with and without the
    correction, and the kept one is the smaller."""
    from hwquant.core.pipeline.stages import bias_correction_where_it_helps

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    batches = [[torch.randn(4, 3, 8, 8) + 1.0] for _ in range(3)]
    state = _state(model, batches)
    for node in state.graph:
        if "weight" in node.weights:
            _coarsen(node, bits=2)
    bias_correction_where_it_helps(state, batches)
    errors = state.report.bias_correction_error
    assert 0 < errors["with"] and 0 < errors["without"] and errors["with"] != errors["without"]
    x = torch.cat([b[0] for b in batches])
    q = state.adapter.fake_quantized_model(state.graph)
    with torch.no_grad():
        ref = model(x)
        err = float((q(x) - ref).pow(2).sum() / ref.pow(2).sum())
    assert err == pytest.approx(min(errors.values()), rel=1e-4)
