"""Linear collapsing: two consecutive linear layers become one, exactly, where that is possible."""
import pytest
import torch
from torch import nn

from hwquant.core.passes.bn_folding import fold_batch_norms
from hwquant.core.passes.linear_collapsing import collapse_linear_layers
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import capture

torch.manual_seed(0)


def _run(model, x):
    model = model.eval()
    graph = capture(model, [x])
    n = collapse_linear_layers(graph, PytorchAdapter())
    with torch.no_grad():
        want, got = model(x), build_module(graph)(x)
    return graph, n, want, got


def _modules(graph, cls):
    return [node for node in graph if node.kind == "module" and issubclass(node.type, cls)]


@pytest.mark.parametrize("first", [
    dict(kernel_size=3, padding=1), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=5, dilation=2, padding=3),
    dict(kernel_size=3, padding=1, padding_mode="reflect"), dict(kernel_size=3, padding=0, bias=False)])
@pytest.mark.parametrize("second_stride", [1, 2])
def test_conv_then_pointwise_conv_collapses_exactly(first, second_stride):
    model = nn.Sequential(nn.Conv2d(3, 16, **first), nn.Conv2d(16, 4, 1, stride=second_stride))
    graph, n, want, got = _run(model, torch.randn(2, 3, 13, 11))
    assert n == 1
    (conv,) = _modules(graph, nn.Conv2d)
    assert conv.weights["weight"].shape == (4, 3) + conv.weights["weight"].shape[2:]
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-5)


def test_pointwise_then_kxk_conv_collapses_when_the_padding_is_exact():
    x = torch.randn(2, 2, 9, 9)
    for model in (nn.Sequential(nn.Conv2d(2, 8, 1, bias=False), nn.Conv2d(8, 4, 3, padding=1)),
                  nn.Sequential(nn.Conv2d(2, 8, 1), nn.Conv2d(8, 4, 3, stride=2)),
                  nn.Sequential(nn.Conv2d(2, 8, 1), nn.Conv2d(8, 4, 3, padding=1, padding_mode="replicate"))):
        graph, n, want, got = _run(model, x)
        assert n == 1 and torch.allclose(got, want, atol=1e-5)
    # a 1x1 conv with a bias before a zero-padding conv: the border would see b1 instead of 0
    graph, n, _, _ = _run(nn.Sequential(nn.Conv2d(2, 8, 1), nn.Conv2d(8, 4, 3, padding=1)), x)
    assert n == 0 and len(_modules(graph, nn.Conv2d)) == 2


def test_linear_chain_collapses_to_one_layer():
    model = nn.Sequential(nn.Linear(6, 32), nn.Linear(32, 16, bias=False), nn.Linear(16, 5))
    for x in (torch.randn(4, 6), torch.randn(4, 7, 6)):
        graph, n, want, got = _run(model, x)
        assert n == 2
        (fc,) = _modules(graph, nn.Linear)
        assert fc.weights["weight"].shape == (5, 6) and torch.allclose(got, want, atol=1e-5)


def test_conv_bn_pointwise_conv_collapses_after_folding():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Conv2d(8, 8, 1)).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 8, 8)
    graph = capture(model, [x])
    adapter = PytorchAdapter()
    assert fold_batch_norms(graph, adapter) == 1
    assert collapse_linear_layers(graph, adapter) == 1
    with torch.no_grad():
        assert torch.allclose(build_module(graph)(x), model(x), atol=1e-5)


class TwoReaders(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.a(x)
        return self.b(y) + self.c(y)


class IntermediateOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        y = self.a(x)
        return self.b(y), y


@pytest.mark.parametrize("model, x", [
    (TwoReaders(), torch.randn(1, 3, 6, 6)),                                             # other reader
    (IntermediateOutput(), torch.randn(2, 4)),                                           # model output
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1)), torch.randn(1, 3, 6, 6)),  # activation
    (nn.Sequential(nn.Conv2d(8, 8, 3, groups=8), nn.Conv2d(8, 4, 1)), torch.randn(1, 8, 6, 6)),   # grouped
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 1, padding=1)), torch.randn(1, 3, 6, 6)),  # padded 1x1
    (nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 3)), torch.randn(1, 3, 9, 9)),             # kxk -> kxk
    (nn.Sequential(nn.Linear(64, 4), nn.Linear(4, 64)), torch.randn(2, 64)),                      # would grow
    (nn.Sequential(nn.ConvTranspose2d(3, 8, 2, stride=2), nn.Conv2d(8, 4, 1)), torch.randn(1, 3, 4, 4)),
])
def test_leaves_alone_what_it_must_not_collapse(model, x):
    graph, n, want, got = _run(model, x)
    assert n == 0
    assert all(torch.allclose(a, b) for a, b in zip(want if isinstance(want, tuple) else [want],
                                                    got if isinstance(got, tuple) else [got]))
