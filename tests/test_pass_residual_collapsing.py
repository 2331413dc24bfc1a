"""Residual collapsing: conv(x) + x becomes one convolution with the identity in its kernel."""
import dataclasses
import operator

import pytest
import torch
from torch import nn

from hwquant.core.graph.framework_adapter import LinearGeometry
from hwquant.core.passes.residual_collapsing import collapse_residuals, identity_tap
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import capture

torch.manual_seed(0)


class Residual(nn.Module):
    def __init__(self, conv, order="conv_first", op="plus"):
        super().__init__()
        self.conv, self.order, self.op = conv, order, op

    def forward(self, x):
        y = self.conv(x)
        a, b = (y, x) if self.order == "conv_first" else (x, y)
        if self.op == "plus":
            return a + b
        if self.op == "torch.add":
            return torch.add(a, b)
        return a.add(b)


def _run(model, x, priors=None):
    model = model.eval()
    graph = capture(model, [x])
    n = collapse_residuals(graph, PytorchAdapter(), priors)
    with torch.no_grad():
        return graph, n, model(x), build_module(graph)(x)


@pytest.mark.parametrize("conv", [
    nn.Conv2d(6, 6, 3, padding=1), nn.Conv2d(6, 6, 1), nn.Conv2d(6, 6, 5, padding=4, dilation=2),
    nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.Conv2d(6, 6, 3, padding=1, groups=3, bias=False),
    nn.Conv2d(6, 6, 4, padding="same"), nn.Conv2d(6, 6, 3, padding=1, padding_mode="reflect"),
    nn.Conv1d(6, 6, 3, padding=1)])
@pytest.mark.parametrize("order, op", [("conv_first", "plus"), ("x_first", "plus"), ("conv_first", "torch.add"),
                                       ("x_first", "method")])
@pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")
def test_conv_plus_input_collapses_exactly(conv, order, op):
    x = torch.randn(2, 6, 9, 9) if isinstance(conv, nn.Conv2d) else torch.randn(2, 6, 9)
    priors = {"conv": "stale"}
    graph, n, want, got = _run(Residual(conv, order, op), x, priors)
    assert n == 1 and priors == {}
    assert not any(node.type in (operator.add, torch.add, torch.Tensor.add) for node in graph)
    assert graph.outputs == "conv_add_collapsed"  # MCT's name
    assert torch.allclose(got, want, atol=1e-5)


class OtherReader(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y + x, y


class AddsAnotherTensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.pre = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.conv(self.pre(x)) + x


class WithAlpha(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return torch.add(self.conv(x), x, alpha=2.0)


class PaddedFirst(nn.Module):
    """The convolution reads a padded x, not x."""

    def __init__(self):
        super().__init__()
        self.pad, self.conv = nn.ZeroPad2d((2, 0, 1, 1)), nn.Conv2d(4, 4, 3)

    def forward(self, x):
        return self.conv(self.pad(x)) + x


def test_identity_tap_needs_the_output_position_on_a_kernel_tap():
    g = LinearGeometry("conv", 4, 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))
    assert identity_tap(g) == (1, 1)
    assert identity_tap(dataclasses.replace(g, padding=((2, 0), (1, 1)))) == (2, 1)
    assert identity_tap(dataclasses.replace(g, padding=((1, 0), (1, 1)))) is None           # shape changes
    assert identity_tap(dataclasses.replace(g, dilation=(2, 2), padding=((1, 3), (2, 2)))) is None  # between taps
    assert identity_tap(dataclasses.replace(g, stride=(2, 1))) is None
    assert identity_tap(dataclasses.replace(g, out_channels=8)) is None


@pytest.mark.parametrize("model", [OtherReader(), AddsAnotherTensor(), WithAlpha(), PaddedFirst()])
def test_leaves_alone_what_it_must_not_collapse(model):
    graph, n, want, got = _run(model, torch.randn(1, 4, 6, 6))
    assert n == 0
    for a, b in zip(want if isinstance(want, tuple) else [want], got if isinstance(got, tuple) else [got]):
        assert torch.allclose(a, b)
