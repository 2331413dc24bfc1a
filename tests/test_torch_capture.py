"""Capturing PyTorch models into the core graph, and building them back."""
import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hwquant.core.graph.model_graph import NodeKind
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import CaptureError, capture


class Everything(nn.Module):
    """Modules, functional calls and tensor methods of many kinds, two inputs, three outputs."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8 * 4 * 4, 10)
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, x, y):
        a = F.relu(self.bn(self.conv(x)))
        b = torch.sigmoid(self.dw(a)) * a + self.scale
        c = torch.cat([a, b], dim=1)[:, :8]
        d = F.interpolate(c, scale_factor=0.5, mode="nearest")
        e = d.permute(0, 2, 3, 1).reshape(d.shape[0], -1)
        f = torch.flatten(F.adaptive_avg_pool2d(d, 4), 1)
        g = self.fc(f) - e.mean(dim=1, keepdim=True)
        h = torch.matmul(y, y.transpose(1, 2))
        return g, h, {"chunks": torch.chunk(y, 2, dim=-1)[0]}


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b, atol=1e-5)
    if isinstance(a, dict):
        return all(_same(a[k], b[k]) for k in a)
    return all(_same(x, z) for x, z in zip(a, b))


def test_capture_and_rebuild_many_constructs():
    model = Everything().eval()
    x, y = torch.randn(2, 3, 8, 8), torch.randn(2, 5, 6)
    graph = capture(model, [x, y])
    kinds = {n.kind for n in graph}
    assert kinds == {NodeKind.INPUT, NodeKind.MODULE, NodeKind.FUNCTION, NodeKind.METHOD, NodeKind.CONSTANT}
    types = {n.type for n in graph}
    assert {nn.Conv2d, nn.BatchNorm2d, nn.Linear, F.relu, torch.cat, operator.getitem, operator.mul,
            torch.matmul, torch.Tensor.permute, torch.Tensor.reshape, F.interpolate, torch.flatten} <= types
    conv = graph.node("conv")
    assert conv.weights["weight"].shape == (8, 3, 3, 3) and conv.framework_attr["groups"] == 1
    assert conv.output_shape == (2, 8, 8, 8)
    assert len(graph.input_nodes) == 2
    assert isinstance(graph.outputs, tuple) and isinstance(graph.outputs[2], dict)
    rebuilt = build_module(graph)
    assert _same(model(x, y), rebuilt(x, y))


class HeadSlices(nn.Module):
    """Slices whose bounds are computed from the input's size (multi-head attention written by hand)."""

    def forward(self, x):
        dh = x.shape[-1] // 4
        return torch.cat([x[..., h * dh:(h + 1) * dh].softmax(-1) for h in range(4)], dim=-1)


def test_slice_bounds_from_tensor_sizes_rebuild():
    x = torch.randn(2, 5, 16)
    graph = capture(HeadSlices(), [x])
    assert _same(HeadSlices()(x), build_module(graph)(x))  # bounds were left as unresolved references


def test_capture_does_not_modify_the_model():
    model = Everything().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    capture(model, [torch.randn(1, 3, 8, 8), torch.randn(1, 5, 6)])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


class ShapeBranch(nn.Module):
    """Python control flow on a shape: torch.fx cannot trace it, torch.export can."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.conv(x)
        if y.shape[-1] > 3:
            y = torch.relu(y)
        return self.fc(F.hardtanh(y, 0.0, 6.0).mean((2, 3)))


def test_torch_export_fallback_keeps_layers():
    model = ShapeBranch().eval()
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(model)
    graph = capture(model, [x])
    modules = {n.module_path: n.type for n in graph if n.kind == NodeKind.MODULE}
    assert modules == {"conv": nn.Conv2d, "fc": nn.Linear}
    hardtanh = next(n for n in graph if "hardtanh" in n.name)
    assert hardtanh.framework_attr["min_val"] == 0.0  # schema names, for layer filters
    assert torch.allclose(build_module(graph)(x), model(x), atol=1e-6)


class DeadLayer(nn.Module):
    """A layer computed and never read, in a model only torch.export captures."""

    def __init__(self):
        super().__init__()
        self.conv, self.unused, self.fc = nn.Conv2d(3, 8, 3), nn.Conv2d(3, 4, 1), nn.Linear(8, 2)

    def forward(self, x):
        self.unused(x)  # dead code: torch.export records it, dead-code elimination drops it
        y = torch.stack([z for z in self.conv(x).unbind(1)], 1)  # iterating a Proxy stops torch.fx
        return self.fc(y.mean((2, 3)))


def test_torch_export_fallback_with_a_dead_layer():
    model, x = DeadLayer().eval(), torch.randn(2, 3, 8, 8)
    graph = capture(model, [x])
    assert {n.module_path for n in graph if n.kind == NodeKind.MODULE} == {"conv", "fc"}
    assert torch.allclose(build_module(graph)(x), model(x), atol=1e-6)


class ValueBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = ValueBranch()

    def forward(self, x):
        return self.gate(x) * 2


def test_uncapturable_model_error_names_module_and_construct():
    with pytest.raises(CaptureError) as info:
        capture(Wrapper(), [torch.randn(2, 3)])
    message = str(info.value)
    assert "ValueBranch.forward" in message and "if x.sum() > 0" in message
    assert "torch.where" in message  # says what to do


def test_model_that_fails_on_the_inputs():
    with pytest.raises(CaptureError, match="failed to run on the representative inputs"):
        capture(nn.Linear(4, 2), [torch.randn(2, 3)])


class FunctionalNet(nn.Module):
    """Layers written with torch.nn.functional on the model's own parameters; `computed` adds a
    convolution whose kernel is computed (stays a float product); `branch` stops torch.fx."""

    def __init__(self, computed=False, branch=False):
        super().__init__()
        self.computed, self.branch = computed, branch
        self.w1, self.b1 = nn.Parameter(torch.randn(8, 3, 3, 3) * 0.3), nn.Parameter(torch.randn(8) * 0.1)
        self.w2 = nn.Parameter(torch.randn(8, 1, 3, 3) * 0.3)
        self.w3, self.b3 = nn.Parameter(torch.randn(5, 8) * 0.3), nn.Parameter(torch.zeros(5))

    def forward(self, x):
        x = F.relu(F.conv2d(x, self.w1, self.b1, padding=1))
        if self.branch and x.shape[-1] > 4:  # shape control flow: only torch.export captures it
            x = x * 1.0
        x = F.relu(F.conv2d(x, self.w2, None, stride=2, padding=1, groups=8))
        if self.computed:
            x = F.conv2d(x, self.w2 * 0.5, padding=1, groups=8)
        return F.linear(x.mean((2, 3)), self.w3, self.b3)


@pytest.mark.parametrize("branch", [False, True], ids=["fx", "torch.export"])
def test_functional_layers_on_parameters_are_quantized_as_layers(branch):
    import hwquant as mct
    from hwquant.torch.quantizers import PytorchQuantizationWrapper
    torch.manual_seed(0)
    model = FunctionalNet(computed=True, branch=branch).eval()
    graph = capture(model, [torch.randn(2, 3, 16, 16)])
    layers = [n.type for n in graph if n.kind == NodeKind.MODULE]
    assert layers.count(nn.Conv2d) == 2 and layers.count(nn.Linear) == 1  # the computed kernel stays a function
    data = [[torch.randn(8, 3, 16, 16)] for _ in range(3)]
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data))
    wrapped = [m for m in q.modules() if isinstance(m, PytorchQuantizationWrapper)]
    assert len(wrapped) == 3
    for w in wrapped:  # the kernels the model computes with are on an 8-bit grid
        kernel = w.quantized_weights()["weight"].detach()
        assert all(len(torch.unique(kernel[c])) <= 256 for c in range(kernel.shape[0]))
        assert not torch.equal(kernel, w.weight)
    x = torch.randn(4, 3, 16, 16)
    f, o = model(x), q(x)
    assert 10 * torch.log10(f.pow(2).mean() / (f - o).pow(2).mean()) > 25


class BatchBranch(nn.Module):
    """Branches on the batch size (and stops torch.fx): torch.export fixes the batch it was shown."""

    def __init__(self):
        super().__init__()
        self.small, self.large = nn.Linear(16, 128), nn.Linear(16, 512)

    def forward(self, x):
        return self.large(x) if x.shape[0] > 8 else self.small(x)


class FreeSizes(nn.Module):
    """Stops torch.fx (iteration over a tensor) but depends on no size: every size stays free."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.stack([c * 2 for c in self.conv(x).unbind(1)], 1)


def test_a_size_the_capture_fixed_is_checked_on_every_call():
    import hwquant as mct
    model = BatchBranch().eval()
    data = [[torch.randn(32, 16)] for _ in range(2)]
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data))
    assert q(torch.randn(32, 16)).shape == (32, 512)
    with pytest.raises(AssertionError, match="must have at least 9 in dimension 0.*torch.export"):
        q(torch.randn(4, 16))  # float gives (4, 128): never the captured branch silently
    assert q(torch.randn(12, 16)).shape == (12, 512)  # other sizes within the captured range run
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:  # the checks are part of the graph: saved, and exportable
        loaded = mct.exporter.load_quantized_model(mct.exporter.save_quantized_model(q, Path(tmp) / "m.pt"))
        with pytest.raises(AssertionError, match="at least 9"):
            loaded(torch.randn(4, 16))
        mct.exporter.pytorch_export_model(q, Path(tmp) / "m.onnx", lambda: iter(data))  # traced on a full batch


def test_sizes_the_model_does_not_depend_on_stay_free():
    import hwquant as mct
    model = FreeSizes().eval()
    data = [[torch.randn(4, 3, 8, 8)] for _ in range(2)]
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data))
    for shape in [(1, 3, 8, 8), (7, 3, 12, 20)]:
        x = torch.randn(*shape)
        assert q(x).shape == model(x).shape
    with pytest.raises(AssertionError, match="dimension 1"):
        q(torch.randn(2, 5, 8, 8))  # the channels are fixed by the convolution


class SavedThenReLUd(nn.Module):
    """VGG-style slices: a tensor saved for a skip connection is later overwritten by ReLU(inplace=True),
    so the skip connection carries the ReLU's output."""

    def __init__(self):
        super().__init__()
        self.slice1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.slice2 = nn.Sequential(nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3, padding=1))
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        h = self.slice1(x)
        skip = h
        y = self.slice2(h)
        y.add_(1.0)
        return self.head(torch.cat([y, skip], 1))


def test_in_place_aliasing_is_kept_when_tensors_are_observed():
    torch.manual_seed(0)
    model = SavedThenReLUd().eval()
    x = torch.randn(2, 3, 8, 8)
    graph = capture(model, [x])
    observed = [n.name for n in graph if n.kind == NodeKind.MODULE]
    out, _ = build_module(graph, extra_outputs=observed)(x)  # the statistics model
    assert torch.allclose(out, model(x.clone()), atol=1e-6)


class HeadComputedTwice(nn.Module):
    """A head run twice, one result thrown away (as Ultralytics' pose and segmentation heads under its IMX
    export), and a layer called for nothing."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)
        self.unused = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        kept = self.head(y)
        _ = self.head(y) * 2, self.unused(y)
        return kept


def test_layers_no_output_reads_are_left_out(caplog):
    model, x = HeadComputedTwice().eval(), torch.randn(2, 3, 8, 8)
    with caplog.at_level("INFO", logger="hwquant"):
        graph = capture(model, [x])
    assert sorted(n.name for n in graph if n.kind == NodeKind.MODULE) == ["conv", "head"]
    assert torch.allclose(build_module(graph)(x), model(x), atol=1e-6)
    assert "2 layer call(s) whose results no output reads were left out" in caplog.text
    assert "head" in caplog.text and "unused" in caplog.text
    # the weights memory counts the head once, and not the unused layer
    import hwquant as mct
    ru = mct.core.pytorch_resource_utilization_data(model, lambda: iter([[x]]))
    assert ru.weights_memory == pytest.approx(3 * 8 * 9 + 8 * 4)
