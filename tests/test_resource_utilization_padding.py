"""Resource figures mean the same on Keras as on PyTorch for the same network (issue 29, item 7).

Keras computes a torchvision convolution with 'padding=1' as a ZeroPadding2D before a 'valid' convolution
(keras.applications pads so before every stride-2 convolution). A zero padding read by a convolution is
that convolution's padding: no tensor of its own in activation memory, its input alive until the
convolution's output is written, and the convolution reads its input's bits (BOPs). MobileNetV2 gave
1,404,928 activation bytes on Keras against 1,505,280 on PyTorch before, and BOPs 14 % higher (the
convolutions behind a padding read 32-bit inputs)."""
import itertools

import numpy as np
import pytest

import hwquant as mct
from hwquant.core.configuration.config import RUTarget
from hwquant.core.mixed_precision.resources import ResourceModel
from hwquant.core.pipeline.stages import prepare
from hwquant.core.pipeline.resource_utilization import compute_resource_utilization, final_config, padding_layers

torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")
nn = torch.nn
L = keras.layers

VERSIONS = ["1.0", "4.0"]  # ZeroPadding2D unquantized (1.0) and quantization-preserving (4.0)


def _torch_net(zero_pad_module=False):
    """conv 3x3 -> BN -> ReLU6 -> depthwise 3x3 stride 2 -> BN -> ReLU6 -> conv 1x1 -> ReLU (torchvision's padding)."""
    def padded(conv_padding_free, pad):
        return [nn.ZeroPad2d(pad), conv_padding_free] if zero_pad_module else [conv_padding_free]

    p = 0 if zero_pad_module else 1
    layers = [*padded(nn.Conv2d(3, 8, 3, padding=p, bias=False), 1), nn.BatchNorm2d(8), nn.ReLU6(),
              *padded(nn.Conv2d(8, 8, 3, stride=2, padding=p, groups=8, bias=False), 1), nn.BatchNorm2d(8), nn.ReLU6(),
              nn.Conv2d(8, 16, 1), nn.ReLU()]
    return nn.Sequential(*layers).eval()


def _keras_net():
    """The same network as keras.applications writes it: ZeroPadding2D before 'valid' convolutions."""
    x = keras.Input((16, 16, 3))
    y = L.ReLU(6.0)(L.BatchNormalization(epsilon=1e-5)(L.Conv2D(8, 3, use_bias=False)(L.ZeroPadding2D(1)(x))))
    y = L.DepthwiseConv2D(3, strides=2, use_bias=False)(L.ZeroPadding2D(((1, 1), (1, 1)))(y))
    y = L.ReLU(6.0)(L.BatchNormalization(epsilon=1e-5)(y))
    return keras.Model(x, L.ReLU()(L.Conv2D(16, 1)(y)))


def _data(channels_last):
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    return [x.transpose(0, 2, 3, 1)] if channels_last else [torch.from_numpy(x)]


@pytest.mark.parametrize("version", VERSIONS)
def test_keras_and_pytorch_give_the_same_figures_for_the_same_network(version):
    tpc = mct.get_target_platform_capabilities(version, "imx500")
    ru_torch = mct.core.pytorch_resource_utilization_data(_torch_net(), lambda: iter([_data(False)]),
                                                          target_platform_capabilities=tpc)
    ru_pad = mct.core.pytorch_resource_utilization_data(_torch_net(zero_pad_module=True), lambda: iter([_data(False)]),
                                                        target_platform_capabilities=tpc)
    ru_keras = mct.core.keras_resource_utilization_data(_keras_net(), lambda: iter([_data(True)]),
                                                        target_platform_capabilities=tpc)
    # peak: the first convolution holds its (padded) input 16x16x3 and its output 16x16x8, one byte each
    assert ru_torch.activation_memory == 16 * 16 * 3 + 16 * 16 * 8
    for ru in (ru_pad, ru_keras):
        assert ru.activation_memory == ru_torch.activation_memory
        assert ru.weights_memory == ru_torch.weights_memory
        assert ru.bops == ru_torch.bops


@pytest.mark.parametrize("version", VERSIONS)
def test_the_mixed_precision_rows_count_paddings_alike(version):
    """Mixed precision's resource rows (the integer program's) give the figures compute_resource_utilization does."""

    tpc = mct.get_target_platform_capabilities(version, "imx500")
    state = _keras_state(_keras_net(), lambda: iter([_data(True)]), mct.core.CoreConfig(), tpc)
    prepare(state)
    graph, adapter = state.graph, state.adapter
    assert len(padding_layers(graph, adapter.is_zero_padding, adapter.kernel_axes)) == 2
    configurable = [n for n in graph if len(n.candidates) > 1]
    model = ResourceModel(graph, configurable, adapter.kernel_axes, adapter.kernel_attr, adapter.is_zero_padding)
    for node in graph:
        node.final_config = node.candidates[0] if node.candidates else None
    choices = itertools.product(*[range(len(n.candidates)) for n in configurable])
    for choice in itertools.islice(choices, 0, None, 7):
        for node, c in zip(configurable, choice):
            node.final_config = node.candidates[c]
        ru = compute_resource_utilization(graph, final_config, adapter)
        figures = model.figures(list(choice))
        assert figures[RUTarget.ACTIVATION] == pytest.approx(ru.activation_memory)
        assert figures[RUTarget.BOPS] == pytest.approx(ru.bops)


def test_a_padding_with_other_readers_or_its_own_quantizer_keeps_its_tensor():
    """Only a zero padding a convolution alone reads (and that does not requantize) is that convolution's."""
    x = keras.Input((8, 8, 3))
    pad = L.ZeroPadding2D(1)(x)
    two_readers = keras.Model(x, [L.Conv2D(4, 3)(pad), L.MaxPooling2D()(pad)])
    to_pooling = keras.Model(x, L.MaxPooling2D()(L.ZeroPadding2D(1)(x)))

    for model in (two_readers, to_pooling):
        state = _keras_state(model, lambda: iter([[np.zeros((2, 8, 8, 3), np.float32)]]), mct.core.CoreConfig(), None)
        prepare(state)
        assert padding_layers(state.graph, state.adapter.is_zero_padding, state.adapter.kernel_axes) == {}


def _keras_state(*args):
    from hwquant.keras.session import start_session
    return start_session(*args).state
