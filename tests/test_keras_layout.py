"""The Keras adapter's kernels in the core's layout compute what the Keras layers compute (checked
against torch's convolutions, which define that layout), and 'same' padding is Keras'."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from keras import layers  # noqa: E402

from hwquant.keras.adapter import KerasAdapter  # noqa: E402
from hwquant.keras.capture import capture  # noqa: E402


def _node_and_output(layer, x):
    inp = keras.Input(x.shape[1:])
    model = keras.Model(inp, layer(inp))
    graph = capture(model, [x])
    node = [n for n in graph if n.kind == "module"][0]
    return graph, node, np.asarray(keras.ops.convert_to_numpy(model(x)))


@pytest.mark.parametrize("layer, torch_fn", [
    (layers.Conv2D(6, 3, groups=1), lambda x, w: F.conv2d(x, w)),
    (layers.Conv2D(6, 3, groups=2), lambda x, w: F.conv2d(x, w, groups=2)),
    (layers.DepthwiseConv2D(3, depth_multiplier=2), lambda x, w: F.conv2d(x, w, groups=4)),
    (layers.Conv2DTranspose(6, 3, strides=2), lambda x, w: F.conv_transpose2d(x, w, stride=2)),
], ids=["conv", "grouped", "depthwise", "transposed"])
def test_canonical_kernels_compute_the_layer(layer, torch_fn):
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(2, 7, 7, 4)).astype("float32")
    layer.use_bias = False
    graph, node, expected = _node_and_output(layer, x)
    adapter = KerasAdapter(graph)
    kernel = node.weights["kernel"]
    canonical = adapter.canonical_kernel(node, kernel)
    np.testing.assert_array_equal(adapter.framework_kernel(node, canonical), kernel)
    with torch.no_grad():
        out = torch_fn(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(np.ascontiguousarray(canonical)))
    bias = node.weights.get("bias", 0)
    np.testing.assert_allclose(out.permute(0, 2, 3, 1).numpy() + bias, expected, rtol=1e-4, atol=1e-4)


def test_dense_canonical_kernel_is_out_by_in():
    x = np.random.default_rng(1).normal(size=(3, 5)).astype("float32")
    graph, node, expected = _node_and_output(layers.Dense(4), x)
    w = KerasAdapter(graph).canonical_kernel(node, node.weights["kernel"])
    np.testing.assert_allclose(x @ w.T + node.weights["bias"], expected, rtol=1e-5, atol=1e-5)


def test_same_padding_puts_the_odd_pixel_after():
    x = np.zeros((1, 8, 8, 3), "float32")
    graph, node, _ = _node_and_output(layers.Conv2D(4, 3, strides=2, padding="same"), x)
    g = KerasAdapter(graph).linear_geometry(node)
    assert (g.padding, g.stride, g.in_channels, g.out_channels) == (((0, 1), (0, 1)), (2, 2), 3, 4)
