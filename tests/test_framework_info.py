"""FrameworkInfo: both constructor forms (MCT's eight arguments, the seed's six), lookups and validation."""
import pytest

from hwquant.core.configuration.config import DefaultDict
from hwquant.core.configuration.framework_info import FrameworkInfo
from hwquant.tpc.enums import QuantizationMethod


# Stand-ins for framework layers.
class Conv2D:
    pass


class Dense:
    pass


class Add:
    pass


class ReLU:
    pass


class Softmax:
    pass


class Reshape:
    pass


class Transpose:
    pass


kernel_ops, activation_ops, no_quantization_ops = [Conv2D, Dense], [Add, ReLU, Softmax], [Reshape, Transpose]


def pot_quantizer(n_bits, params): return lambda x: x
def sym_quantizer(n_bits, params): return lambda x: x


def test_seed_examples():
    kernel_channels_mapping = DefaultDict({Conv2D: (3, 2)})
    fw = FrameworkInfo(kernel_ops, [], [], kernel_channels_mapping, {}, {})
    assert fw.is_kernel_op(Conv2D) and not fw.is_activation_op(Add)
    assert fw.get_kernel_channels(Conv2D) == (3, 2) and fw.get_kernel_channels(Dense) is None
    assert fw.activation_quantizer_mapping == {} and fw.weights_quantizer_mapping == {}

    fw = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, kernel_channels_mapping,
                       {"softmax": (0, 1)}, {})
    assert fw.activation_has_min_max("softmax") and fw.get_activation_min_max("softmax") == (0, 1)
    assert not fw.activation_has_min_max("relu")

    activation_min_max_mapping = {"softmax": (0, 1), "relu": (0, None), "linear": (None, None)}
    fw = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, kernel_channels_mapping,
                       activation_min_max_mapping, {Softmax: (0, 1)})
    assert fw.layers_has_min_max(Softmax) and fw.get_layer_min_max(Softmax) == (0, 1)
    assert not fw.layers_has_min_max(ReLU)
    assert fw.get_activation_min_max("relu") == (0, None)


def test_eight_argument_form_positional_and_keywords():
    amap = {QuantizationMethod.POWER_OF_TWO: pot_quantizer, QuantizationMethod.SYMMETRIC: sym_quantizer}
    kcm = DefaultDict({Conv2D: (3, 2), Dense: (1, 0)}, (None, None))
    fw = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, amap, {0: pot_quantizer}, kcm,
                       {"softmax": (0, 1)}, {Softmax: (0, 1)})
    assert fw.activation_quantizer_mapping[QuantizationMethod.SYMMETRIC] is sym_quantizer
    assert fw.weights_quantizer_mapping == {QuantizationMethod.POWER_OF_TWO: pot_quantizer}  # int key -> enum
    assert fw.get_kernel_channels(Dense) == (1, 0) and fw.get_kernel_channels(Add) == (None, None)
    fw2 = FrameworkInfo(kernel_ops=kernel_ops, activation_ops=activation_ops, no_quantization_ops=no_quantization_ops,
                        activation_quantizer_mapping=amap, weights_quantizer_mapping={},
                        kernel_channels_mapping=kcm, activation_min_max_mapping={}, layer_min_max_mapping={})
    assert fw2.is_no_quantization_op(Reshape) and not fw2.is_no_quantization_op(Conv2D)
    # six positional plus keyword quantizer mappings
    fw3 = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, kcm, {}, {}, activation_quantizer_mapping=amap)
    assert fw3.activation_quantizer_mapping[QuantizationMethod.POWER_OF_TWO] is pot_quantizer
    # a plain dict is accepted for the channels mapping
    assert FrameworkInfo(kernel_ops, [], [], {Conv2D: (0, 1)}, {}, {}).get_kernel_channels(Conv2D) == (0, 1)


def test_lookups_of_unknown_keys():
    fw = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, DefaultDict(), {}, {})
    with pytest.raises(KeyError, match="softmax"):
        fw.get_activation_min_max("softmax")
    with pytest.raises(KeyError, match="Softmax"):
        fw.get_layer_min_max(Softmax)


@pytest.mark.parametrize("args, kwargs, exc, words", [
    ((Conv2D, [], [], DefaultDict(), {}, {}), {}, TypeError, ["kernel_ops", "list"]),
    ((kernel_ops, {Add}, [], DefaultDict(), {}, {}), {}, TypeError, ["activation_ops"]),
    ((kernel_ops, [], "Reshape", DefaultDict(), {}, {}), {}, TypeError, ["no_quantization_ops"]),
    ((kernel_ops, [], [], [(Conv2D, (3, 2))], {}, {}), {}, TypeError, ["kernel_channels_mapping", "DefaultDict"]),
    ((kernel_ops, [], [], DefaultDict({Conv2D: 3}), {}, {}), {}, ValueError, ["kernel_channels_mapping", "Conv2D"]),
    ((kernel_ops, [], [], DefaultDict({}, (1, 2, 3)), {}, {}), {}, ValueError, ["kernel_channels_mapping", "default"]),
    ((kernel_ops, [], [], DefaultDict(), [("softmax", (0, 1))], {}), {}, TypeError, ["activation_min_max_mapping"]),
    ((kernel_ops, [], [], DefaultDict(), {"softmax": (1, 0)}, {}), {}, ValueError, ["softmax", "min must be <= max"]),
    ((kernel_ops, [], [], DefaultDict(), {"softmax": 1}, {}), {}, ValueError,
     ["activation_min_max_mapping", "softmax"]),
    ((kernel_ops, [], [], DefaultDict(), {}, {Softmax: (2, -2)}), {}, ValueError, ["layer_min_max_mapping", "min"]),
    ((kernel_ops, [], [], DefaultDict(), {}, {Softmax: (0, "1")}), {}, ValueError, ["layer_min_max_mapping"]),
    ((kernel_ops, [], [], [pot_quantizer], {}, DefaultDict(), {}, {}), {}, TypeError,
     ["activation_quantizer_mapping", "dict"]),
    ((kernel_ops, [], [], {"x": pot_quantizer}, {}, DefaultDict(), {}, {}), {}, ValueError,
     ["activation_quantizer_mapping", "'x'"]),
    ((kernel_ops, [], []), dict(kernel_channels_mapping=DefaultDict(), activation_quantizer_mapping={9: pot_quantizer}),
     ValueError, ["activation_quantizer_mapping", "9", "QuantizationMethod"]),
    ((kernel_ops, [], []), dict(kernel_channels_mapping=DefaultDict(), weights_quantizer_mapping={0: "pot"}),
     TypeError, ["weights_quantizer_mapping", "POWER_OF_TWO", "callable"]),
    ((kernel_ops, [], []), {}, TypeError, ["missing", "kernel_channels_mapping"]),
    ((kernel_ops, [], [], DefaultDict(), {}, {}), dict(kernel_ops=[]), TypeError, ["two values", "kernel_ops"]),
    ((kernel_ops, [], [], DefaultDict(), {}, {}), dict(kernel_op=[]), TypeError, ["unexpected", "kernel_op"]),
    ((1,) * 9, {}, TypeError, ["at most 8"]),
    ((kernel_ops, [], [Conv2D], DefaultDict(), {}, {}), {}, ValueError, ["no_quantization_ops", "Conv2D"]),
])
def test_validation(args, kwargs, exc, words):
    with pytest.raises(exc) as e:
        FrameworkInfo(*args, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_mct_2_6_named_mappings():
    """MCT 2.6's form: six mappings, a dict first; the kernel ops are the attribute mapping's keys."""
    fw = FrameworkInfo({QuantizationMethod.POWER_OF_TWO: pot_quantizer}, DefaultDict({Conv2D: (3, 2)}, (None, None)),
                       {"softmax": (0, 1)}, {Softmax: (0, 1)}, DefaultDict({Conv2D: ["kernel"], Dense: ["kernel"]}, [None]),
                       DefaultDict({Dense: -1}, 3))
    assert fw.kernel_ops == [Conv2D, Dense] and fw.is_kernel_op(Dense) and not fw.is_kernel_op(ReLU)
    assert fw.get_kernel_op_attributes(Conv2D) == ["kernel"] and fw.get_kernel_op_attributes(ReLU) == [None]
    assert fw.get_out_channel_axis(Dense) == -1 and fw.get_out_channel_axis(Conv2D) == 3
    assert fw.get_kernel_channels(Dense) == (None, None) and fw.layers_has_min_max(Softmax)
    assert fw.activation_quantizer_mapping[QuantizationMethod.POWER_OF_TWO] is pot_quantizer
    named = FrameworkInfo(activation_quantizer_mapping={}, kernel_channels_mapping=DefaultDict({Conv2D: (3, 2)}),
                          activation_min_max_mapping={}, layer_min_max_mapping={},
                          kernel_ops_attributes_mapping={Conv2D: ["kernel"]}, out_channel_axis_mapping={})
    assert named.kernel_ops == [Conv2D] and named.get_out_channel_axis(Conv2D) is None


@pytest.mark.parametrize("kwargs, match", [
    (dict(kernel_ops_attributes_mapping={Conv2D: "kernel"}), "list of weight attribute names"),
    (dict(kernel_ops_attributes_mapping={Conv2D: ["kernel"]}, out_channel_axis_mapping={Dense: 1.5}), "axis"),
    (dict(activation_quantizer_mapping={}), "missing required argument\\(s\\): kernel_ops \\(or kernel_ops_attributes"),
])
def test_mct_2_6_mappings_checked(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        FrameworkInfo(kernel_channels_mapping=DefaultDict({}), **kwargs)


def test_pytorch_default_info_has_the_named_mappings():
    from torch import nn

    from hwquant.torch.adapter import DEFAULT_PYTORCH_INFO as info
    assert info.get_kernel_op_attributes(nn.Conv2d) == ["weight"] and info.get_kernel_op_attributes(nn.ReLU) == [None]
    assert info.get_out_channel_axis(nn.Linear) == -1 and info.get_out_channel_axis(nn.Conv2d) == 1
