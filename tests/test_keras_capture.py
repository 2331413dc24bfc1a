"""Capture of Keras 3 functional and Sequential models into the core graph, and the float model built
back from it (same outputs as the user's model)."""
import re

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from keras import layers, ops  # noqa: E402

from hwquant.core.graph.model_graph import NodeKind  # noqa: E402
from hwquant.keras.builder import build_model  # noqa: E402
from hwquant.keras.capture import CaptureError, capture  # noqa: E402


def _functional():
    keras.utils.set_random_seed(0)
    inner = keras.Sequential([layers.Conv2D(8, 3, padding="same", activation="relu", name="ic"),
                              layers.DepthwiseConv2D(3, padding="same", name="idw")], name="inner")
    x = keras.Input((12, 12, 3), name="img")
    y = layers.Conv2D(8, 3, padding="same", name="c1")(x)
    y = layers.BatchNormalization(name="bn")(y)
    y = layers.ReLU(6.0, name="r1")(y)
    z = inner(y)
    s = ops.multiply(ops.add(y, z), 0.5)
    c = layers.Concatenate(name="cat")([s, y])
    p = ops.mean(c, axis=(1, 2))
    model = keras.Model(x, layers.Dense(5, activation="softmax", name="fc")(p), name="net")
    bn = model.get_layer("bn")
    bn.moving_mean.assign(np.linspace(-0.3, 0.3, 8).astype("float32"))
    bn.moving_variance.assign(np.linspace(0.5, 2.0, 8).astype("float32"))
    return model


def _data(shape=(4, 12, 12, 3)):
    return np.random.default_rng(0).normal(size=shape).astype("float32")


def test_functional_model_with_nested_sequential_and_raw_ops():
    model = _functional()
    graph = capture(model, [_data()])
    names = [n.name for n in graph]
    assert names[0] == "img" and graph.node("img").output_shape == (4, 12, 12, 3)
    # the nested Sequential is inlined; fused activations become Activation nodes
    # raw keras.ops calls are named by Keras' per-process counters (add, add_1, ...)
    plain = [re.sub(r"_\d+$", "", n) if graph.node(n).kind == NodeKind.FUNCTION else n for n in names]
    assert plain == ["img", "c1", "bn", "r1", "inner_ic", "inner_ic_activation", "inner_idw",
                     "add", "multiply", "cat", "mean", "fc", "fc_activation"]
    fc = graph.node("fc")
    assert fc.framework_attr["activation"] == "linear" and graph.node("fc_activation").inputs == ["fc"]
    assert set(graph.node("c1").weights) == {"kernel", "bias"} and graph.node("c1").weights["kernel"].shape == (3, 3, 3, 8)
    assert set(graph.node("bn").weights) == {"gamma", "beta", "moving_mean", "moving_variance"}
    add, multiply, mean = (names[plain.index(k)] for k in ("add", "multiply", "mean"))
    assert graph.node(add).inputs == ["r1", "inner_idw"] and graph.node("cat").inputs == [multiply, "r1"]
    assert graph.outputs == "fc_activation" and graph.node(mean).output_shape == (4, 16)


def test_the_built_float_model_computes_the_same_function():
    model = _functional()
    x = _data()
    rebuilt = build_model(capture(model, [x]))
    np.testing.assert_allclose(np.asarray(ops.convert_to_numpy(rebuilt(x))), np.asarray(ops.convert_to_numpy(model(x))),
                               rtol=1e-5, atol=1e-6)
    assert rebuilt is not model and all(a is not b for a in rebuilt.layers for b in model.layers)


def test_sequential_models():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((28, 28, 1)), layers.Conv2D(4, 3, activation="relu"), layers.MaxPooling2D(),
                              layers.Flatten(), layers.Dense(10)])
    x = _data((2, 28, 28, 1))
    graph = capture(model, [x])
    assert [n.type.__name__ if n.kind == NodeKind.MODULE else n.kind for n in graph] == \
        ["input", "Conv2D", "Activation", "MaxPooling2D", "Flatten", "Dense"]
    np.testing.assert_allclose(ops.convert_to_numpy(build_model(graph)(x)), ops.convert_to_numpy(model(x)), rtol=1e-5, atol=1e-6)


def test_models_without_a_graph_are_refused_with_the_way_out():
    with pytest.raises(CaptureError, match="no input shape yet.*keras.Input"):
        capture(keras.Sequential([layers.Dense(3)]), [_data((2, 4))])

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = layers.Dense(3)

        def call(self, x):
            return self.d(x)
    sub = Sub()
    sub(_data((2, 4)))
    with pytest.raises(CaptureError, match="subclassed model.*functional model"):
        capture(sub, [_data((2, 4))])
    with pytest.raises(CaptureError, match="takes 1 input"):
        capture(_functional(), [_data(), _data()])


def _kernel_layers_model():
    """Every Keras layer kind that carries a kernel, with fused activations on the kinds that have them."""
    keras.utils.set_random_seed(3)
    x = keras.Input((16, 16, 3), name="img")
    y = layers.SeparableConv2D(8, 3, padding="same", depth_multiplier=2, name="sep")(x)
    y = layers.BatchNormalization(name="sep_norm")(y)
    y = layers.PReLU(name="prelu")(y)
    y = layers.DepthwiseConv2D(3, strides=2, padding="same", name="dw")(y)
    y = layers.Conv2DTranspose(8, 3, strides=2, padding="same", name="convt")(y)
    seq = layers.Reshape((64, 16))(layers.Conv2D(4, 1, name="pw")(y))
    seq = layers.Dense(6, name="dense3d")(seq)
    seq = layers.Conv1D(6, 3, padding="same", name="c1")(seq)
    seq = layers.SeparableConv1D(6, 3, padding="same", name="sep1")(seq)
    seq = layers.DepthwiseConv1D(3, padding="same", name="dw1")(seq)
    seq = layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 4), bias_axes="de", name="einsum")(seq)
    seq = layers.Reshape((64, 8))(seq)
    seq = layers.GRU(6, return_sequences=True, name="gru")(seq)
    seq = layers.Bidirectional(layers.LSTM(5, return_sequences=True), name="bilstm")(seq)
    seq = layers.SimpleRNN(4, name="rnn")(seq)
    model = keras.Model(x, layers.Dense(3, name="head")(seq), name="kernels")
    bn = model.get_layer("sep_norm")
    bn.moving_mean.assign(np.linspace(-0.3, 0.3, 8).astype("float32"))
    bn.moving_variance.assign(np.linspace(0.5, 2.0, 8).astype("float32"))
    return model


def test_separable_and_recurrent_layers_are_captured_as_the_function_they_compute():
    model = _kernel_layers_model()
    x = _data((2, 16, 16, 3))
    graph = capture(model, [x])
    # a separable convolution is its depthwise and its 1x1 pointwise convolution (MCT splits it too)
    assert graph.node("sep_dw").type is layers.DepthwiseConv2D and graph.node("sep_pw").type is layers.Conv2D
    assert graph.node("sep_pw").inputs == ["sep_dw"] and graph.node("sep_norm").inputs == ["sep_pw"]
    assert graph.node("sep1_dw").type is layers.DepthwiseConv1D and graph.node("sep1_pw").type is layers.Conv1D
    # every node keeps the layer it came from (messages, scope filters), and its output is a float tensor
    assert graph.node("sep_dw").module_path == graph.node("sep_pw").module_path == "sep"
    assert graph.node("dw").module_path == "dw" and graph.node("sep_dw").float_output is True
    # a recurrent layer's `activation` is its cell's: it stays inside (splitting it off changed the function)
    assert "gru_activation" not in graph and graph.node("gru").framework_attr["activation"] == "tanh"
    # a Bidirectional layer's two cells keep their own weights
    weights = graph.node("bilstm").weights
    assert "kernel" in weights and "kernel#1" in weights and "recurrent_kernel#1" in weights
    assert not np.array_equal(weights["kernel"], weights["kernel#1"])
    np.testing.assert_allclose(ops.convert_to_numpy(build_model(graph)(x)), ops.convert_to_numpy(model(x)),
                               rtol=1e-4, atol=1e-5)
