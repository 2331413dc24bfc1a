"""Shift-negative correction: a shifted, unsigned activation, with the shift absorbed downstream."""
import operator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from backend_kit import TorchKit
from torch import nn

from hwquant.constants import SIGNED, THRESHOLD
from hwquant.core.passes.shift_negative import apply_shift_negative_correction, shift_value
from hwquant.torch.builder import build_module
from hwquant.tpc.enums import Signedness
from hwquant.tpc.platforms import get_target_platform_capabilities

torch.manual_seed(0)


def _pot_tpc_without_platform():
    """IMX500 1.0's operator options on no named platform: a target that does not need every kernel's output
    quantized, so the shifted activation is fused into the add and left float."""
    return get_target_platform_capabilities("1.0", "imx500").model_copy(update={"tpc_platform_type": None})


def _state(model, batches, tpc=None, **qc):
    qc.setdefault("shift_negative_ratio", 0.3)
    return TorchKit().state(model, batches, tpc or _pot_tpc_without_platform(), **qc)


def _batches(shape, n=3, scale=3.0):
    return [[scale * torch.randn(shape)] for _ in range(n)]


def _adds(graph):
    return [n for n in graph if n.type is operator.add and isinstance(n.call_args[1], float)]


def test_shift_value_is_the_first_unsigned_grid_point_covering_the_minimum():
    assert shift_value(-0.27, 4.0, 8) == pytest.approx(0.28125)  # lsb 1/64: 18 * lsb
    assert shift_value(-0.25, 4.0, 8) == 0.25                    # on the grid already
    assert shift_value(-5.0, 4.0, 8) is None


@pytest.mark.parametrize("second", [nn.Conv2d(8, 4, 3, padding=1), nn.Conv2d(8, 4, 3), nn.Conv2d(8, 8, 3, padding=2,
                                    groups=8, dilation=2), nn.Conv2d(8, 4, 3, padding=1, padding_mode="reflect"),
                                    nn.Conv2d(8, 4, 1, bias=False)])
@pytest.mark.parametrize("act", [nn.SiLU(), nn.Hardswish(), nn.GELU(), nn.LeakyReLU(0.02), nn.PReLU(8, 0.05)])
def test_float_model_unchanged_and_shifted_statistics_non_negative(second, act):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), act, second).eval()
    batches = _batches((4, 3, 8, 8))
    state = _state(model, batches)
    silu = state.graph.node("_1")
    t = silu.final_config.activation_quantization_cfg.activation_quantization_params[THRESHOLD]
    before = state.statistics["_1"]
    if -before.min / t > 0.3:
        pytest.skip("negative tail too large for this draw")
    assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 1
    (add,) = _adds(state.graph)
    c = add.call_args[1]
    assert c >= -before.min and state.graph.successors(silu) == [add]
    # the float function is unchanged
    x = torch.cat([b[0] for b in batches])
    with torch.no_grad():
        assert torch.allclose(build_module(state.graph)(x), model(x), atol=1e-4)
    # the add carries the activation's quantizer, unsigned with the same threshold; the activation is fused into it
    a = add.final_config.activation_quantization_cfg
    assert a.quantized and a.signedness == Signedness.UNSIGNED
    assert a.activation_quantization_params == {THRESHOLD: t, SIGNED: False}
    assert not silu.final_config.activation_quantization_cfg.quantized and silu.fused_into == add.name
    assert any(add.name in g and silu.name in g for g in state.fused_groups)
    # statistics of the shifted tensor
    after = state.statistics[add.name]
    assert after.min >= 0 and after.min == pytest.approx(before.min + c, abs=1e-5)
    assert after.max == pytest.approx(before.max + c, abs=1e-5)
    assert np.allclose(after.channel_mean, before.channel_mean + c, atol=1e-5)
    # a zero-padding layer reads a pad node (value c) and pads no more
    layer = state.graph.node("_2")
    if second.padding != (0, 0) and second.padding_mode == "zeros":
        pad = state.graph.node(layer.inputs[0])
        assert pad.type is F.pad and pad.call_kwargs["value"] == c and layer.call_target.padding == (0, 0)
    # the layer's input (the add, or the pad node) has statistics: bias correction can read its mean
    assert layer.inputs[0] in state.statistics
    # the quantized model builds and runs
    with torch.no_grad():
        assert state.adapter.build(state.graph, quantized=True)(x).shape == model(x).shape


def test_threshold_recalculation_uses_the_shifted_statistics():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 4, 3, padding=1))
    batches = _batches((4, 3, 8, 8))
    state = _state(model, batches, shift_negative_threshold_recalculation=True)
    assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 1
    (add,) = _adds(state.graph)
    params = add.final_config.activation_quantization_cfg.activation_quantization_params
    assert params[SIGNED] is False and params[THRESHOLD] >= state.statistics[add.name].max / 2


def test_shift_resolution_gain_reduces_the_activation_quantization_error():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 4, 1)).eval()
    batches = _batches((8, 3, 8, 8))
    x = torch.cat([b[0] for b in batches])
    errors = []
    for snc in (False, True):
        state = _state(model, batches)
        for node in state.graph:  # keep the kernels float: measure the activation's quantization only
            for wc in node.final_config.weights_quantization_cfg.attrs.values():
                wc.enable_weights_quantization = False
        if snc:
            assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 1
        with torch.no_grad():
            errors.append(((state.adapter.build(state.graph, quantized=True)(x) - model(x)) ** 2).mean().item())
    assert errors[1] < errors[0]


class FlattenDense(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4 * 4 * 4, 5, bias=bias)

    def forward(self, x):
        return self.fc(torch.flatten(F.silu(self.conv(x)), 1))


@pytest.mark.parametrize("bias", [True, False])
def test_shift_passes_through_layout_ops_to_a_dense_layer(bias):
    model = FlattenDense(bias).eval()
    batches = _batches((4, 3, 6, 6))
    state = _state(model, batches)
    assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 1
    x = torch.cat([b[0] for b in batches])
    with torch.no_grad():
        assert torch.allclose(build_module(state.graph)(x), model(x), atol=1e-4)
    assert state.graph.node("fc").weights["bias"].shape == (5,)


class TwoReaders(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = F.silu(self.a(x))
        return self.b(y) + self.c(y)


class SiluOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return F.silu(self.a(x))


@pytest.mark.parametrize("model, kw", [
    (TwoReaders(), {}),
    (SiluOutput(), {}),
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1)), {}),              # no negative range
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.SiLU(), nn.Sigmoid(), nn.Conv2d(8, 4, 1)), {}),  # no linear reader
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.SiLU(), nn.Conv2d(8, 4, 1)), {"shift_negative_ratio": 0.0}),
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.SiLU(), nn.Conv2d(8, 4, 1)),
     {"shift_negative_activation_correction": False}),
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.SiLU(), nn.Conv2d(8, 4, 1)),
     {"tpc": get_target_platform_capabilities("pytorch", "qnnpack")}),                  # UNIFORM activations
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.SiLU(), nn.ConvTranspose2d(8, 4, 2)), {}),    # transposed: not exact
])
def test_leaves_alone_what_it_must_not_touch(model, kw):
    batches = _batches((2, 3, 6, 6))
    state = _state(model, batches, **kw)
    n = len(state.graph)
    assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 0
    assert len(state.graph) == n and not _adds(state.graph)


class _SameSizes(list):
    """Representative batches that all have one size (as RepresentativeData says of such data)."""
    uniform_shapes = True


@pytest.mark.parametrize("data", [_SameSizes, list])
def test_statistics_of_shifted_tensors_are_derived_exactly(data):
    """The add, the bypass op and the pad node get the statistics a pass over the data would give
    them (derived from the collected ones; the pad from data when sizes may vary)."""
    from hwquant.core.statistics.node_parameters import collect_statistics

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Hardswish(), nn.AvgPool2d(2),
                          nn.Conv2d(8, 4, 3, padding=2)).eval()
    batches = data(_batches((4, 3, 8, 8), scale=1.0))
    state = _state(model, batches, shift_negative_ratio=1.0)
    assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 1
    (add,) = _adds(state.graph)
    pad = next(n for n in state.graph if n.type is F.pad)
    names = [add.name, "_2", pad.name]
    derived = {n: state.statistics[n] for n in names}
    collect_statistics(state.graph, state.adapter, state.statistics, names, batches)
    for n in names:
        d, f = derived[n], state.statistics[n]
        assert d.count == f.count
        for attr in ("min", "max", "mean", "std"):
            assert getattr(d, attr) == pytest.approx(getattr(f, attr), rel=1e-5, abs=1e-6), (n, attr)
        np.testing.assert_allclose(d.channel_mean, f.channel_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d.channel_min, f.channel_min, rtol=1e-6, atol=1e-6)
        (de, dc), (fe, fc) = d.histogram(), f.histogram()
        centres = lambda e, c: np.repeat(0.5 * (e[:-1] + e[1:]), c)  # noqa: E731
        # same distribution up to one bin width (the windows are laid out differently)
        assert dc.sum() == fc.sum()
        assert np.abs(np.sort(centres(de, dc)) - np.sort(centres(fe, fc))).max() <= 1.01 * max(d.bin_width, f.bin_width)


def _silu_net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 4, 3, padding=1)).eval()


def test_on_the_imx500_the_shifted_activation_stays_quantized_at_16_bits(caplog):
    """The IMX500 converter refuses a Conv -> SiLU group whose output has no quantizer: where the TPC offers
    16-bit activations (IMX500 4.0), the SiLU keeps a 16-bit signed quantizer in front of the 8-bit unsigned add."""
    batches, model = _batches((4, 3, 8, 8)), _silu_net()
    state = _state(model, batches, tpc=get_target_platform_capabilities("4.0", "imx500"))
    silu = state.graph.node("_1")
    t = silu.final_config.activation_quantization_cfg.activation_quantization_params[THRESHOLD]
    with caplog.at_level("INFO", logger="hwquant.passes"):
        assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 1
    assert "keeps the output of 1 of 1 shifted activations quantized (16 bits)" in caplog.text
    (add,) = _adds(state.graph)
    a, s = add.final_config.activation_quantization_cfg, silu.final_config.activation_quantization_cfg
    assert a.quantized and a.activation_n_bits == 8 and a.activation_quantization_params == {THRESHOLD: t, SIGNED: False}
    # 16 bits on the grid computed for its own 8 bits (MCT's rule; measured better than recomputing them)
    assert s.quantized and s.activation_n_bits == 16 and s.activation_quantization_params == {THRESHOLD: t, SIGNED: True}
    assert silu.fused_into != add.name and not any(add.name in g for g in state.fused_groups)
    x = torch.cat([b[0] for b in batches])
    quantized = state.adapter.build(state.graph, quantized=True)
    holders = [m for m in quantized.modules() if type(m).__name__ == "PytorchActivationQuantizationHolder"]
    assert sorted(h.activation_holder_quantizer.num_bits for h in holders) == [8, 8, 8, 16]  # input, add, output; silu
    with torch.no_grad():
        assert torch.allclose(build_module(state.graph)(x), model(x), atol=1e-4)
        assert quantized(x).shape == (12, 4, 8, 8)


def test_on_the_imx500_without_16_bit_activations_the_shift_is_skipped(caplog):
    """IMX500 1.0 offers no 16-bit activation: the SiLU's output must stay quantized at 8 bits, where the
    shift would gain nothing, so it is not shifted, and the log says why."""
    batches = _batches((4, 3, 8, 8))
    state = _state(_silu_net(), batches, tpc=get_target_platform_capabilities("1.0", "imx500"))
    with caplog.at_level("INFO", logger="hwquant.passes"):
        assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 0
    assert "skips 1 activation(s) (_1): platform 'imx500' needs their output quantized and the TPC offers no " \
        "16-bit activation" in caplog.text
    assert state.graph.node("_1").final_config.activation_quantization_cfg.quantized and not _adds(state.graph)
