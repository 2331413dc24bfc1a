"""ReLU bound to a power of two: linear -> ReLU6 -> linear rescaled so the activation's bound is 8."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hwquant.core.passes.relu_bound import RELU_POT_BOUND, bound_relus_to_power_of_2
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.attach import attach_tpc
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import capture
from hwquant.tpc.platforms import get_target_platform_capabilities

torch.manual_seed(0)


class Functional(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.a, self.b, self.fn = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 3, padding=1), fn

    def forward(self, x):
        return self.b(self.fn(self.a(x)))


def _run(model, x):
    model = model.eval()
    graph = capture(model, [x])
    adapter = PytorchAdapter()
    n = bound_relus_to_power_of_2(graph, adapter)
    with torch.no_grad():
        return graph, adapter, n, model(x), build_module(graph)(x)


@pytest.mark.parametrize("model", [
    nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU6(), nn.Conv2d(8, 4, 1)),
    nn.Sequential(nn.Linear(5, 8), nn.ReLU6(), nn.Linear(8, 3)),
    nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.Hardtanh(0.0, 3.0), nn.Conv2d(8, 4, 3, padding=1)),
    Functional(F.relu6), Functional(lambda t: F.hardtanh(t, 0.0, 5.0))])
def test_bound_moves_to_eight_and_the_model_is_unchanged(model):
    linear = isinstance(model, nn.Sequential) and isinstance(model[0], nn.Linear)
    x = 20 * (torch.randn(16, 5) if linear else torch.randn(2, 3, 8, 8))
    graph, adapter, n, want, got = _run(model, x)
    assert n == 1
    (act,) = [node for node in graph if adapter.activation_info(node) is not None]
    info = adapter.activation_info(act)
    assert (info.name, info.lower, info.upper) == ("hardtanh", 0.0, RELU_POT_BOUND)
    assert torch.allclose(got, want, atol=1e-5)
    # the activation now fills [0, 8]
    with torch.no_grad():
        _, (a,) = build_module(graph, extra_outputs=[act.name])(x)
    assert a.max() > 6.5


def test_bounded_relu_lands_in_the_hardtanh_operator_set():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU6(), nn.Conv2d(8, 4, 1))
    graph, adapter, n, _, _ = _run(model, torch.randn(1, 3, 4, 4))
    fqc = attach_tpc(get_target_platform_capabilities())
    act = graph.node("_1")
    assert fqc.opset_of(act.type, act.framework_attr) == "HardTanh"


class TwoReaders(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = F.relu6(self.a(x))
        return self.b(y), y


@pytest.mark.parametrize("model", [
    nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Hardtanh(0.0, 4.0), nn.Conv2d(8, 4, 1)),   # already 2**k
    nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)),               # unbounded
    nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Hardtanh(-1.0, 3.0), nn.Conv2d(8, 4, 1)),  # not a ReLU
    nn.Sequential(nn.MaxPool2d(1), nn.ReLU6(), nn.Conv2d(3, 4, 1)),                            # not linear
    TwoReaders()])
def test_leaves_alone_what_it_must_not_touch(model):
    graph, _, n, want, got = _run(model, torch.randn(1, 3, 4, 4))
    assert n == 0
