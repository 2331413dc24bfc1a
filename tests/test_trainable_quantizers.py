"""Trainable quantizers: registry, validation, bitwise agreement with their inferable conversion,
and the STE / LSQ gradients written out by hand."""
import math

import numpy as np
import pytest
import torch

from hwquant.core.numerics import quant_math
from hwquant.errors import InvalidConfigError
from hwquant.torch import trainable as tq
from hwquant.torch.quantizers import InferableQuantizer, make_inferable_quantizer
from hwquant.tpc.enums import QuantizationMethod as QM
from hwquant.trainable_infrastructure import (BasePytorchTrainableQuantizer, QuantizationTarget,
                                              TrainableQuantizerActivationConfig, TrainableQuantizerWeightsConfig,
                                              TrainingMethod, VariableGroup, get_trainable_quantizer_class,
                                              mark_quantizer)

W, A = QuantizationTarget.Weights, QuantizationTarget.Activation
STE, LSQ = TrainingMethod.STE, TrainingMethod.LSQ


def wcfg(method=QM.SYMMETRIC, bits=4, params=None, per_channel=True, **over):
    if params is None:
        params = ({"range_min": [-1.0, -0.3, -2.0], "range_max": [1.0, 0.7, 0.5]} if method == QM.UNIFORM
                  else {"threshold": [1.0, 0.5, 2.0] if per_channel else 1.0})
    kw = dict(weights_quantization_method=method, weights_n_bits=bits, weights_quantization_params=params,
              enable_weights_quantization=True, weights_channels_axis=0 if per_channel else None,
              weights_per_channel_threshold=per_channel, min_threshold=2 ** -16)
    kw.update(over)
    return TrainableQuantizerWeightsConfig(**kw)


def acfg(method=QM.POWER_OF_TWO, bits=8, params=None, **over):
    if params is None:
        params = {"range_min": -0.7, "range_max": 3.1} if method == QM.UNIFORM else \
            {"threshold": 4.0 if method == QM.POWER_OF_TWO else 3.0, "is_signed": True}
    kw = dict(activation_quantization_method=method, activation_n_bits=bits, activation_quantization_params=params,
              enable_activation_quantization=True, min_threshold=2 ** -16)
    kw.update(over)
    return TrainableQuantizerActivationConfig(**kw)


ALL = [(target, method, training) for target in (W, A) for method in (QM.POWER_OF_TWO, QM.SYMMETRIC, QM.UNIFORM)
       for training in (STE, LSQ)]


def make(target, method, training, **kw):
    cls = get_trainable_quantizer_class(target, training, method, BasePytorchTrainableQuantizer)
    return cls(wcfg(method) if target == W else acfg(method), **kw)


def sample(target, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 5, 4, generator=g) * (1.5 if target == W else 2.0)


# ------------------------------------------------------------------------------------------ registry
@pytest.mark.parametrize("target,method,training", ALL)
def test_registry_finds_a_quantizer_for_every_supported_combination(target, method, training):
    cls = get_trainable_quantizer_class(target, training, method, BasePytorchTrainableQuantizer)
    assert cls.quantization_target == target and method in cls.quantization_method and cls.identifier == training


def test_registry_names_what_is_available_when_nothing_matches():
    with pytest.raises(InvalidConfigError, match=r"DQA.*available.*\(SYMMETRIC, LSQ\)"):
        get_trainable_quantizer_class(A, TrainingMethod.DQA, QM.SYMMETRIC, BasePytorchTrainableQuantizer)
    with pytest.raises(InvalidConfigError, match="LUT_POT_QUANTIZER"):
        get_trainable_quantizer_class(W, STE, QM.LUT_POT_QUANTIZER, BasePytorchTrainableQuantizer)
    with pytest.raises(InvalidConfigError, match="training method must be one of"):
        get_trainable_quantizer_class(W, "ADAROUND", QM.SYMMETRIC, BasePytorchTrainableQuantizer)
    # MCT spells the training methods as 1-tuples ("STE",): accepted
    assert get_trainable_quantizer_class(W, ("LSQ",), QM.SYMMETRIC, BasePytorchTrainableQuantizer) \
        is tq.LSQSymmetricWeightsTrainableQuantizer


def test_a_second_quantizer_for_a_taken_combination_is_refused():
    with pytest.raises(InvalidConfigError, match="already registered"):
        @mark_quantizer(W, [QM.SYMMETRIC], STE)
        class Another(tq.STESymmetricWeightsTrainableQuantizer):
            pass


def test_unregistered_or_incomplete_quantizers_are_refused():
    class Unregistered(BasePytorchTrainableQuantizer):
        def forward(self, x):
            return x

        def grid(self):
            return None

        def inferable_params(self):
            return {}

    with pytest.raises(InvalidConfigError, match="mark_quantizer"):
        Unregistered(wcfg())

    class Incomplete(BasePytorchTrainableQuantizer):  # no forward / grid / inferable_params
        quantization_target, quantization_method, identifier = W, [QM.SYMMETRIC], STE

    with pytest.raises(TypeError, match="abstract"):
        Incomplete(wcfg())


# ------------------------------------------------------------------------------------------ validation
def test_a_config_of_the_wrong_kind_or_method_is_refused():
    with pytest.raises(InvalidConfigError, match="needs a TrainableQuantizerWeightsConfig"):
        tq.STESymmetricWeightsTrainableQuantizer(acfg())
    with pytest.raises(InvalidConfigError, match=r"implements \['POWER_OF_TWO', 'SYMMETRIC'\].*UNIFORM"):
        tq.LSQSymmetricActivationTrainableQuantizer(acfg(QM.UNIFORM))
    with pytest.raises(InvalidConfigError, match="enable_weights_quantization=False"):
        tq.STESymmetricWeightsTrainableQuantizer(wcfg(enable_weights_quantization=False))
    with pytest.raises(InvalidConfigError, match="freeze_quant_params must be a bool"):
        tq.LSQSymmetricWeightsTrainableQuantizer(wcfg(), freeze_quant_params="yes")


def test_missing_or_contradictory_parameters_are_refused():
    with pytest.raises(InvalidConfigError, match="needs 'range_min'"):
        tq.STEUniformActivationTrainableQuantizer(acfg(QM.UNIFORM, params={"threshold": 1.0}))
    with pytest.raises(InvalidConfigError, match="needs 'threshold'"):
        tq.LSQSymmetricWeightsTrainableQuantizer(wcfg(params={"range_min": -1.0, "range_max": 1.0}))
    with pytest.raises(InvalidConfigError, match="per-tensor quantizer needs one 'threshold', got 3"):
        tq.LSQSymmetricWeightsTrainableQuantizer(wcfg(params={"threshold": [1.0, 2.0, 3.0]}, per_channel=False))
    with pytest.raises(InvalidConfigError, match="finite and > 0"):
        tq.STESymmetricActivationTrainableQuantizer(acfg(params={"threshold": -1.0}))
    with pytest.raises(InvalidConfigError, match="finite"):
        tq.STEUniformActivationTrainableQuantizer(acfg(QM.UNIFORM, params={"range_min": float("nan"), "range_max": 1.0}))
    with pytest.raises(ValueError, match="needs an int weights_channels_axis"):  # the config itself refuses this one
        wcfg(weights_channels_axis=None)
    q = tq.LSQSymmetricWeightsTrainableQuantizer(wcfg())
    with pytest.raises(InvalidConfigError, match="3 per-channel parameters but the tensor has 4 channels"):
        q.initialize_quantization((4, 2), "conv.weight")
    with pytest.raises(InvalidConfigError, match="axis 0 does not exist"):
        q.initialize_quantization((), "scalar")
    q.initialize_quantization((3, 7, 2, 2), "conv.weight")


def test_get_config_from_config_round_trip():
    for target, method, training in ALL:
        q = make(target, method, training)
        again = type(q).from_config(q.get_config())
        assert again.get_config() == q.get_config()
        again.load_state_dict(q.state_dict())
        x = sample(target)
        assert torch.equal(again(x), q(x))
    with pytest.raises(InvalidConfigError, match="expects the dict of get_config"):
        tq.STESymmetricWeightsTrainableQuantizer.from_config({"n_bits": 8})


# ------------------------------------------------------------------------------------------ forward
def _reference(target, method):
    """The inferable quantizer of the config the trainable one starts from (the PTQ result)."""
    cfg = wcfg(method) if target == W else acfg(method)
    if target == W:
        return make_inferable_quantizer(method, cfg.weights_n_bits, cfg.weights_quantization_params, channel_axis=0,
                                        target="weights")
    return make_inferable_quantizer(method, cfg.activation_n_bits, cfg.activation_quantization_params)


@pytest.mark.parametrize("target,method,training", ALL)
def test_starts_on_the_ptq_grid_and_converts_bitwise(target, method, training):
    q = make(target, method, training)
    x = sample(target)
    assert torch.equal(q(x), _reference(target, method)(x))  # training starts exactly where PTQ ended
    with torch.no_grad():  # move the learned parameters off their start
        for p in q.parameters():
            p.mul_(1.37).add_(0.11)
    y = q(x)
    inferable = q.convert_to_inferable_quantizers()
    assert isinstance(inferable, InferableQuantizer)
    assert torch.equal(inferable(x), y)
    q.eval()
    assert torch.equal(q(x), y)
    # the forward value is the grid's own fake quantization
    assert torch.equal(y, quant_math.fake_quantize(x, quant_math.AffineGrid(
        *(torch.as_tensor(v).detach() for v in (q.grid().scale, q.grid().zero_point)),
        q.grid().qmin, q.grid().qmax, q.grid().axis)))


def test_power_of_two_threshold_stays_a_power_of_two_and_learns_through_it():
    q = tq.STESymmetricActivationTrainableQuantizer(acfg(QM.POWER_OF_TWO, params={"threshold": 3.0, "is_signed": True}))
    assert q.threshold.item() == 4.0
    with torch.no_grad():
        q.threshold.fill_(5.0)
    assert float(q.grid().scale.detach()) * 128 == 8.0
    x = torch.tensor([100.0, -100.0, 0.3])
    q(x).sum().backward()
    # clipped above: qmax - z = 127, below: qmin - z = -128; scale = t / 128 passed straight through the rounding
    assert q.threshold.grad.item() == pytest.approx((127 - 128) / 128)
    assert q.convert_to_inferable_quantizers().params["threshold"] == 8.0


# ------------------------------------------------------------------------------------------ gradients
def _grid_tensors(q):
    g = q.grid()
    s = quant_math.per_channel_view(g.scale.detach(), torch.zeros(3, 5, 4), g.axis)
    z = quant_math.per_channel_view(torch.round(torch.as_tensor(g.zero_point).detach()), torch.zeros(3, 5, 4), g.axis)
    return g, s, z


def test_ste_weights_pass_rounding_through_and_keep_ptq_parameters():
    q = tq.STESymmetricWeightsTrainableQuantizer(wcfg(QM.SYMMETRIC))
    assert not q.threshold.requires_grad and q.get_trainable_variables(VariableGroup.QPARAMS) == []
    x = sample(W).requires_grad_(True)
    q(x).sum().backward()
    g, s, z = _grid_tensors(q)
    r = torch.round(x.detach() / s) + z
    assert torch.equal(x.grad, ((r >= g.qmin) & (r <= g.qmax)).float())
    assert 0 < x.grad.sum() < x.numel()  # some values were clipped


@pytest.mark.parametrize("method", [QM.SYMMETRIC, QM.UNIFORM])
@pytest.mark.parametrize("target", [W, A])
def test_lsq_step_size_gradient_matches_the_paper(target, method):
    q = make(target, method, LSQ)
    x = sample(target)
    upstream = torch.linspace(-1, 1, x.numel()).reshape(x.shape)
    (q(x) * upstream).sum().backward()
    g, s, z = _grid_tensors(q)
    xs = x / s
    r = torch.round(xs) + z
    term = torch.where(r < g.qmin, g.qmin - z, torch.where(r > g.qmax, g.qmax - z, torch.round(xs) - xs))
    per_scale = term * upstream
    n = x.numel() // (s.numel() if target == W else x.shape[0])
    factor = 1 / math.sqrt(n * g.qmax)
    expected = (per_scale.sum(dim=(1, 2)) if target == W else per_scale.sum()) * factor
    if method == QM.UNIFORM:  # the scale is the parameter
        assert torch.allclose(q.scale.grad, expected.reshape(q.scale.shape), rtol=1e-5, atol=1e-7)
        outside = (r < g.qmin) | (r > g.qmax)
        dz = torch.where(outside, -s * upstream, torch.zeros_like(x))
        dz = dz.sum(dim=(1, 2)) if target == W else dz.sum()
        assert torch.allclose(q.zero_point.grad, dz.reshape(q.zero_point.shape), rtol=1e-5, atol=1e-7)
    else:  # threshold t = s * 2**(n-1): dL/dt = dL/ds / 2**(n-1)
        scale_per_t = 1 / 2 ** (q.num_bits - 1)
        assert torch.allclose(q.threshold.grad, (expected * scale_per_t).reshape(q.threshold.shape),
                              rtol=1e-5, atol=1e-7)


def test_ste_activation_threshold_learns_from_clipped_values_only():
    q = tq.STESymmetricActivationTrainableQuantizer(acfg(QM.SYMMETRIC, params={"threshold": 2.0, "is_signed": False}))
    x = torch.tensor([0.3, 1.1, 5.0, 9.0, -4.0])
    q(x).sum().backward()
    # unsigned 8 bits: clipped above (5, 9) -> (qmax - 0) * ds/dt = 255 / 256 each; below 0 (-4) -> 0
    assert q.threshold.grad.item() == pytest.approx(2 * 255 / 256)


def test_frozen_override_and_variable_groups():
    q = tq.LSQUniformActivationTrainableQuantizer(acfg(QM.UNIFORM), freeze_quant_params=True)
    assert all(not p.requires_grad for p in q.parameters())
    q = tq.LSQUniformActivationTrainableQuantizer(acfg(QM.UNIFORM))
    assert len(q.get_trainable_variables(VariableGroup.QPARAMS)) == 2
    assert q.get_trainable_variables(VariableGroup.WEIGHTS) == []
    with pytest.raises(InvalidConfigError, match="VariableGroup"):
        q.get_trainable_variables("qparams")


def test_uniform_zero_point_is_rounded_into_the_grid():
    q = tq.LSQUniformActivationTrainableQuantizer(acfg(QM.UNIFORM))
    with torch.no_grad():
        q.zero_point.fill_(300.4)  # beyond 8 bits: clamped to 255, no gradient from the clamp
    x = torch.tensor([-10.0, 0.0, 1.0])
    y = q(x)
    s = float(q.scale)
    assert torch.equal(y, quant_math.fake_quantize(x, quant_math.AffineGrid(np.float32(s), 255.0, 0, 255)))
    y.sum().backward()
    assert q.zero_point.grad.item() == 0.0
    params = q.convert_to_inferable_quantizers().params
    assert params["range_max"] == 0.0 and params["range_min"] == pytest.approx(-255 * s)
