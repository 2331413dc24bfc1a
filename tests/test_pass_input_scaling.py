"""Input scaling: an input whose range is below its threshold is scaled up, the first layers' kernels
down; a clear error where that is not exact."""
import numpy as np
import pytest
import torch
from torch import nn

from hwquant.constants import THRESHOLD
from hwquant.core.pipeline.candidates import select_base_configs
from hwquant.core.configuration.config import CoreConfig, QuantizationConfig, QuantizationErrorMethod
from hwquant.core.passes.input_scaling import apply_input_scaling, check_input_scaling, scale_statistics
from hwquant.core.pipeline.stages import calibrate, compute_parameters, prepare
from hwquant.core.pipeline.state import PipelineState
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.errors import InvalidConfigError
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import capture
from hwquant.tpc.platforms import get_target_platform_capabilities

torch.manual_seed(0)


def _state(model, batches, tpc=None, calibrated=True):
    graph = capture(model.eval(), batches[0])
    state = PipelineState(graph, CoreConfig(quantization_config=QuantizationConfig(input_scaling=True,
                                                                                   activation_error_method=QuantizationErrorMethod.NOCLIPPING)),
                          PytorchAdapter(), tpc or get_target_platform_capabilities())
    prepare(state)
    if calibrated:
        calibrate(state, batches)
        select_base_configs(state.graph)
        compute_parameters(state)
    return state


def _batches(shape, reach=0.6):
    out = []
    for _ in range(2):
        x = torch.rand(shape) * 2 - 1
        out.append([x / x.abs().max() * reach])
    return out


class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.pad, self.a, self.b = nn.ZeroPad2d(1), nn.Conv2d(3, 4, 3), nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return self.a(self.pad(x)) + self.b(x)[:, :, :, :]


@pytest.mark.parametrize("model, shape", [(nn.Sequential(nn.Conv2d(3, 4, 3)), (4, 3, 6, 6)),
                                          (nn.Sequential(nn.Linear(5, 3)), (8, 5)),
                                          (nn.Sequential(nn.ZeroPad2d(1), nn.Conv2d(3, 4, 3)), (4, 3, 6, 6)),
                                          (TwoConvs(), (4, 3, 6, 6))])
def test_input_is_scaled_to_fill_its_threshold(model, shape):
    batches = _batches(shape)
    state = _state(model, batches)
    inp = state.graph.input_nodes[0]
    t = inp.final_config.activation_quantization_cfg.activation_quantization_params[THRESHOLD]
    assert t == 1.0  # power of two above 0.6
    scales = apply_input_scaling(state.graph, state.adapter, state.statistics)
    assert list(scales) == [inp.name]
    s = scales[inp.name]
    assert s == pytest.approx(t / 0.6)
    x = torch.cat([b[0] for b in batches])
    with torch.no_grad():  # the float model of the scaled input is the original model
        assert torch.allclose(build_module(state.graph)(x * s), model(x), atol=1e-5)
    assert state.statistics[inp.name].max == pytest.approx(float(x.max()) * s)
    # the layers' weight parameters follow their new kernels
    for node in state.graph:
        wc = node.final_config.weights_quantization_cfg.attrs.get("weight") if node.final_config else None
        if wc is not None and wc.enable_weights_quantization:
            amax = np.abs(node.weights["weight"]).reshape(node.weights["weight"].shape[0], -1).max(axis=1)
            top = 2 ** (wc.weights_n_bits - 1)  # the no-clipping threshold keeps the max one step below it
            # (MSE may take a step a little above max|w|)
            assert np.all(np.asarray(wc.weights_quantization_params[THRESHOLD]) <= amax * top / (top - 1) * 1.3)


def test_nothing_to_gain_leaves_the_model_alone():
    # data reaching -1 exactly, positives below the grid's top (127/128): the threshold 1 clips nothing
    batches = [[b[0].clamp(max=0.99)] for b in _batches((4, 3, 6, 6), reach=1.0)]
    for b in batches:
        b[0].view(-1)[0] = -1.0
    state = _state(nn.Sequential(nn.Conv2d(3, 4, 3)), batches)
    w = state.graph.node("_0").weights["weight"].copy()
    assert apply_input_scaling(state.graph, state.adapter, state.statistics) == {}
    assert np.array_equal(w, state.graph.node("_0").weights["weight"]) and state.report.input_scale == {}  # (the pass alone)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)) * x


class Passthrough(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.conv(x), torch.nn.functional.max_pool2d(x, 2)


@pytest.mark.parametrize("model, words", [
    (nn.Sequential(nn.ReLU(), nn.Conv2d(3, 4, 3)), "not a linear layer"),
    (Residual(), "not a linear layer"),
    (Passthrough(), "model output"),
])
def test_clear_error_where_it_does_not_apply(model, words):
    batches = _batches((2, 3, 6, 6))
    with pytest.raises(InvalidConfigError, match=words) as err:
        check_input_scaling(_state(model, batches, calibrated=False).graph, PytorchAdapter())
    assert "input_scaling=False" in str(err.value)
    with pytest.raises(InvalidConfigError, match=words):
        state = _state(model, batches)
        apply_input_scaling(state.graph, state.adapter, state.statistics)


def test_uniform_input_quantizer_has_no_threshold_to_fill():
    batches = _batches((2, 3, 6, 6))
    state = _state(nn.Sequential(nn.Conv2d(3, 4, 3)), batches, tpc=get_target_platform_capabilities("pytorch", "qnnpack"))
    with pytest.raises(InvalidConfigError, match="UNIFORM"):
        apply_input_scaling(state.graph, state.adapter, state.statistics)


def test_scaled_statistics_equal_statistics_of_the_scaled_tensor():
    rng = np.random.default_rng(0)
    batches = [rng.normal(0.3, 1.0, size=(16, 3, 5, 5)).astype(np.float32) for _ in range(3)]
    a, b = TensorStatistics(per_channel=True), TensorStatistics(per_channel=True)
    for x in batches:
        a.update(x)
    scaled = scale_statistics(a, 4.0)  # a power of two: the scaled samples are exact
    for x in batches:
        b.update(x * 4.0)
    for name in ("min", "max", "mean", "std", "count"):
        assert getattr(scaled, name) == pytest.approx(getattr(b, name), rel=1e-9)
    for name in ("channel_min", "channel_max", "channel_mean"):
        assert np.allclose(getattr(scaled, name), getattr(b, name))
    (e1, c1), (e2, c2) = scaled.histogram(), b.histogram()
    assert np.allclose(e1, e2) and np.array_equal(c1, c2)
    assert a.max * 4.0 == scaled.max  # the original is not modified
