"""Trainable quantizer configs: validation and the get_config / from_config round trip."""
import pytest

from hwquant.tpc.enums import QuantizationMethod
from hwquant.trainable_infrastructure.config import (TrainableQuantizerActivationConfig,
                                                     TrainableQuantizerCandidateConfig, TrainableQuantizerWeightsConfig)


def weights_kwargs(**over):
    kw = dict(weights_quantization_method=QuantizationMethod.SYMMETRIC, weights_n_bits=8,
              weights_quantization_params={"threshold": [1.0, 2.0]}, enable_weights_quantization=True,
              weights_channels_axis=0, weights_per_channel_threshold=True, min_threshold=2 ** -16)
    kw.update(over)
    return kw


def activation_kwargs(**over):
    kw = dict(activation_quantization_method=QuantizationMethod.UNIFORM, activation_n_bits=8,
              activation_quantization_params={"range_min": -1.0, "range_max": 1.0},
              enable_activation_quantization=True, min_threshold=1e-4)
    kw.update(over)
    return kw


def test_weights_config_and_round_trip():
    cands = [TrainableQuantizerCandidateConfig(n_bits=4, quantization_params={"threshold": [1.0, 1.0]}),
             {"n_bits": 8, "quantization_params": {"threshold": [1.0, 2.0]}}]
    cfg = TrainableQuantizerWeightsConfig(**weights_kwargs(weights_quantization_candidates=cands))
    assert cfg.weights_quantization_method is QuantizationMethod.SYMMETRIC
    assert [c.n_bits for c in cfg.weights_bits_candidates] == [4, 8]  # MCT attribute name
    d = cfg.get_config()
    assert d["weights_quantization_method"] == 2 and type(d["weights_quantization_method"]) is int
    assert d["weights_quantization_candidates"][0] == {"n_bits": 4, "quantization_params": {"threshold": [1.0, 1.0]}}
    again = TrainableQuantizerWeightsConfig.from_config(d)
    assert again == cfg and again.get_config() == d
    d["weights_quantization_params"]["threshold"] = 0  # get_config returns copies
    assert cfg.weights_quantization_params == {"threshold": [1.0, 2.0]}


def test_activation_config_and_round_trip():
    cfg = TrainableQuantizerActivationConfig(**activation_kwargs())
    assert cfg.activation_bits_candidates is None
    d = cfg.get_config()
    assert d == {"activation_quantization_method": 3, "activation_n_bits": 8,
                 "activation_quantization_params": {"range_min": -1.0, "range_max": 1.0},
                 "enable_activation_quantization": True, "min_threshold": 1e-4,
                 "activation_quantization_candidates": None}
    assert TrainableQuantizerActivationConfig.from_config(d) == cfg
    # positional, in the documented order
    pos = TrainableQuantizerActivationConfig(QuantizationMethod.POWER_OF_TWO, 4, {"threshold": 1.0}, True, 1e-3)
    assert pos.activation_n_bits == 4


def test_per_tensor_weights_may_omit_axis_and_pair_axis_is_accepted():
    cfg = TrainableQuantizerWeightsConfig(**weights_kwargs(weights_per_channel_threshold=False,
                                                           weights_channels_axis=None))
    assert cfg.weights_channels_axis is None
    assert TrainableQuantizerWeightsConfig(**weights_kwargs(weights_channels_axis=(3, 2))).weights_channels_axis == 3


@pytest.mark.parametrize("over, words", [
    (dict(weights_quantization_method=9), ["weights_quantization_method", "9"]),
    (dict(weights_quantization_method="SYMMETRIC"), ["weights_quantization_method"]),
    (dict(weights_n_bits=1), ["weights_n_bits", "2 to 16"]),
    (dict(weights_n_bits=32), ["weights_n_bits", "32"]),
    (dict(weights_quantization_params=[1.0]), ["weights_quantization_params", "dict"]),
    (dict(weights_quantization_params={1: 2.0}), ["weights_quantization_params", "str"]),
    (dict(enable_weights_quantization=1), ["enable_weights_quantization", "True or False"]),
    (dict(weights_channels_axis=None), ["weights_per_channel_threshold", "weights_channels_axis"]),
    (dict(weights_channels_axis="0"), ["weights_channels_axis", "int"]),
    (dict(min_threshold=0), ["min_threshold", "> 0"]),
    (dict(weights_quantization_candidates=[]), ["weights_quantization_candidates", "non-empty"]),
    (dict(weights_quantization_candidates=[4, 8]), ["weights_quantization_candidates", "item 0"]),
    (dict(weights_quantization_candidates=[{"n_bits": 4, "quantization_params": {}}] * 2),
     ["weights_quantization_candidates", "distinct"]),
    (dict(weights_quantization_candidates=[{"n_bits": 40, "quantization_params": {}}]), ["n_bits", "40"]),
])
def test_weights_config_rules(over, words):
    with pytest.raises((ValueError, TypeError)) as e:
        TrainableQuantizerWeightsConfig(**weights_kwargs(**over))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_missing_and_unknown_fields():
    kw = activation_kwargs()
    del kw["min_threshold"]
    with pytest.raises(ValueError, match="min_threshold"):
        TrainableQuantizerActivationConfig(**kw)
    with pytest.raises(TypeError, match="activation_nbits"):
        TrainableQuantizerActivationConfig(**activation_kwargs(activation_nbits=4))
    with pytest.raises(TypeError, match="dict"):
        TrainableQuantizerActivationConfig.from_config([1, 2])


def test_assignment_validated():
    cfg = TrainableQuantizerActivationConfig(**activation_kwargs())
    with pytest.raises(ValueError, match="activation_n_bits"):
        cfg.activation_n_bits = 0
    cfg.activation_n_bits = 4
    w = TrainableQuantizerWeightsConfig(**weights_kwargs())
    with pytest.raises(ValueError, match="weights_channels_axis"):
        w.weights_channels_axis = None  # still per-channel: contradiction
