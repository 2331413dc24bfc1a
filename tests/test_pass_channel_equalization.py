"""Activation channel equalization: per-channel scaling across a ReLU from the batch-norm prior."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from hwquant.core.passes.bn_folding import fold_batch_norms
from hwquant.core.passes.channel_equalization import (batch_norm_priors, equalization_scale,
                                                      equalize_activation_channels, rectified_gaussian_moments)
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import capture

torch.manual_seed(0)


def _bn(n, dims=2):
    bn = (nn.BatchNorm2d if dims == 2 else nn.BatchNorm1d)(n)
    with torch.no_grad():
        bn.weight.copy_(torch.linspace(0.2, 6.0, n))
        bn.bias.copy_(torch.linspace(-1.0, 2.0, n))
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return bn


def _prepare(model, x, mark_quantized=None):
    model = model.eval()
    graph = capture(model, [x])
    adapter = PytorchAdapter()
    priors = batch_norm_priors(graph, adapter)
    fold_batch_norms(graph, adapter, priors)  # the priors follow the renamed layers
    if mark_quantized is not None:
        for node in graph:
            cfg = SimpleNamespace(activation_quantization_cfg=SimpleNamespace(quantized=mark_quantized))
            node.candidates = [cfg]
    return graph, adapter, priors


def test_rectified_gaussian_moments_and_scale_match_sampling():
    rng = np.random.default_rng(0)
    mu, std = np.array([-1.0, 0.0, 0.5, 3.0]), np.array([0.5, 2.0, 4.0, 1.5])
    x = np.maximum(rng.normal(mu, std, size=(400_000, 4)), 0)
    mean, second = rectified_gaussian_moments(mu, std)
    assert np.allclose(mean, x.mean(0), rtol=1e-2, atol=1e-3)
    assert np.allclose(second, (x ** 2).mean(0), rtol=1e-2, atol=1e-3)
    scale = equalization_scale(mu, std)
    assert np.all(scale <= 1) and np.allclose(np.minimum(x.std(0), 1.0), (x * scale).std(0), rtol=2e-2)
    assert equalization_scale(np.array([1.0]), np.array([0.0])) == 1.0


@pytest.mark.parametrize("between", [[], [nn.ZeroPad2d(1)], [nn.MaxPool2d(2)], [nn.Dropout(0.1), nn.ZeroPad2d(1)]])
@pytest.mark.parametrize("second", [nn.Conv2d(8, 4, 3), nn.Conv2d(8, 8, 3, groups=8), nn.Conv2d(8, 4, 1, groups=2),
                                    nn.ConvTranspose2d(8, 4, 2, stride=2)])
def test_conv_bn_relu_conv_is_equalized_exactly(between, second):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _bn(8), nn.ReLU(), *between, second)
    x = torch.randn(2, 3, 10, 10)
    graph, adapter, priors = _prepare(model, x)
    before = graph.node("_0_bn").weights["weight"].copy()
    assert equalize_activation_channels(graph, adapter, priors) == 1
    mu, std = priors["_0_bn"]
    scale = equalization_scale(mu, std)
    assert np.any(scale < 0.9)  # the wide channels shrink
    assert np.allclose(graph.node("_0_bn").weights["weight"], before * scale.reshape(-1, 1, 1, 1).astype(np.float32))
    with torch.no_grad():
        assert torch.allclose(build_module(graph)(x), model(x), atol=1e-4)


def test_dense_bn_relu_dense_is_equalized_exactly():
    model = nn.Sequential(nn.Linear(5, 8), _bn(8, dims=1), nn.ReLU(), nn.Linear(8, 3))
    x = torch.randn(16, 5)
    graph, adapter, priors = _prepare(model, x, mark_quantized=True)
    assert equalize_activation_channels(graph, adapter, priors) == 1
    with torch.no_grad():
        assert torch.allclose(build_module(graph)(x), model(x), atol=1e-4)


class OtherReader(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.bn, self.b = nn.Conv2d(3, 8, 3), _bn(8), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = torch.relu(self.bn(self.a(x)))
        return self.b(y), y


@pytest.mark.parametrize("model, quantized", [
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1)), None),            # no batch-norm prior
    (nn.Sequential(nn.Conv2d(3, 8, 3), _bn(8), nn.ReLU6(), nn.Conv2d(8, 4, 1)), None),   # not a ReLU
    (nn.Sequential(nn.Conv2d(3, 8, 3), _bn(8), nn.ReLU(), nn.Conv2d(8, 4, 1)), False),   # ReLU not quantized
    (nn.Sequential(nn.Conv2d(3, 8, 3), _bn(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 4)), None),
    (OtherReader(), None)])
def test_leaves_alone_what_it_must_not_touch(model, quantized):
    graph, adapter, priors = _prepare(model, torch.randn(1, 3, 6, 6), mark_quantized=quantized)
    assert equalize_activation_channels(graph, adapter, priors) == 0
