"""Keras inferable quantizers compute hwquant's grid exactly (core/numerics/quant_math), ties included, on the
fused torch path and the keras.ops path alike."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")

from hwquant.core.numerics import quant_math  # noqa: E402
from hwquant.keras.quantizers import make_quantizer  # noqa: E402
from hwquant.tpc.enums import QuantizationMethod as M  # noqa: E402


@pytest.mark.parametrize("method, bits, params, axis", [
    (M.POWER_OF_TWO, 8, {"threshold": 4.0, "is_signed": True}, None),
    (M.POWER_OF_TWO, 8, {"threshold": 2.0, "is_signed": False}, None),
    (M.POWER_OF_TWO, 16, {"threshold": 8.0, "is_signed": True}, None),
    (M.SYMMETRIC, 8, {"threshold": 3.0, "is_signed": True}, None),
    (M.UNIFORM, 8, {"range_min": -1.3, "range_max": 2.2}, None),
    (M.SYMMETRIC, 4, {"threshold": np.array([1.0, 2.0, 0.5, 3.0, 0.25])}, 3),
])
def test_fake_quantization_is_quant_maths(method, bits, params, axis):
    q = make_quantizer(method, bits, params, channel_axis=axis, target="weights" if axis is not None else "activation")
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(4, 9, 7, 5)) * 3).astype("float32")
    if axis is None:  # exact ties between grid points
        x.reshape(-1)[:64] = (np.arange(64) - 32).astype("float32") * float(np.asarray(q.grid.scale)) / 2
    expected = quant_math.fake_quantize(x, q.grid)
    got = np.asarray(keras.ops.convert_to_numpy(q(keras.ops.convert_to_tensor(x))))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("method", [M.LUT_POT_QUANTIZER, M.LUT_SYM_QUANTIZER])
@pytest.mark.parametrize("threshold, axis", [(2.0, None), (np.array([1.0, 3.0, 0.5, 2.0, 0.25]), 3)])
def test_lookup_table_weights_quantizer_is_quant_maths(method, threshold, axis):
    table = np.array([-128, -60, -20, -4, 0, 4, 20, 127])  # 3 bits: at most 8 entries
    q = make_quantizer(method, 3, {"lut_values": table, "threshold": threshold}, channel_axis=axis, target="weights")
    assert q.lut_values == table.tolist()
    x = (np.random.default_rng(1).normal(size=(4, 9, 7, 5)) * 2).astype("float32")
    expected = quant_math.fake_quantize(x, q.grid)
    got = np.asarray(keras.ops.convert_to_numpy(q(keras.ops.convert_to_tensor(x))))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="Keras' torch backend's layout shortcut")
@pytest.mark.parametrize("kind,kwargs", [
    ("conv", dict(filters=5, kernel_size=3, padding="same")),
    ("conv", dict(filters=4, kernel_size=3, strides=2, padding="same", activation="relu")),
    ("conv", dict(filters=4, kernel_size=(1, 3), strides=(2, 1), padding="valid", use_bias=False)),
    ("conv", dict(filters=6, kernel_size=3, dilation_rate=2, padding="same", groups=3)),
    ("conv", dict(filters=3, kernel_size=1, padding="valid")),
    ("depthwise", dict(kernel_size=3, padding="same", depth_multiplier=2)),
    ("depthwise", dict(kernel_size=3, strides=2, padding="same", activation="relu6")),
    ("pool", dict(pool_size=2)), ("pool", dict(pool_size=3, strides=2))])
def test_channels_last_shortcut_is_keras_own_computation(kind, kwargs):
    """On Keras' torch backend hwquant runs quantized convolutions (and a trainable model's max pooling) on the
    NHWC tensor's channels-last view instead of Keras' layout copies: bitwise Keras' outputs and gradients."""
    import types

    import torch

    from hwquant.keras import torch_layers
    make = {"conv": keras.layers.Conv2D, "depthwise": keras.layers.DepthwiseConv2D, "pool": keras.layers.MaxPooling2D}
    layer = make[kind](**kwargs)
    x = torch.as_tensor(np.random.default_rng(0).normal(size=(2, 9, 11, 6)).astype(np.float32))
    layer.build(tuple(x.shape))
    if kind == "pool":
        x = torch.round(x * 4) / 4  # (ties inside a window)
        fast = types.MethodType(torch_layers._max_pooling_call, layer)
    else:
        assert torch_layers.handles(layer, x)
        fast = lambda inputs: torch_layers.call(layer, inputs)  # noqa: E731
    results = []
    for run in (layer, fast):
        xi = x.clone().requires_grad_(True)
        y = run(xi)
        weights = [w.value for w in layer.trainable_weights]
        grads = torch.autograd.grad((y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum(), [xi, *weights])
        results.append([y.detach(), *grads])
    for a, b in zip(*results):
        assert a.shape == b.shape and torch.equal(a, b)
