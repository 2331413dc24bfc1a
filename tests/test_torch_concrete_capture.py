"""The third capture route (torch/capture/concrete_route.py): models that compute shapes and parameters
from tensor values, as onnx2torch's modules do, traced on the real inputs; sizes checked on every call.
The real converted models (onnx2torch on the ONNX files PyPI packages ship) are tested at the end,
skipped when the packages are not in .cache/assets/real."""
from __future__ import annotations

import math
import os

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hwquant as mct
from hwquant.core.graph.model_graph import NodeKind
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import CaptureError, capture
from hwquant.torch.capture.concrete_route import SIZE_REASON
from hwquant.torch.deployment.saved_model import load_quantized_model, save_quantized_model


# ---- modules written the way onnx2torch writes them ---------------------------------------------
class OnnxLikeResize(nn.Module):
    """onnx2torch's Resize: the scales are a tensor, read with .tolist()."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scales", torch.tensor([1.0, 1.0, 2.0, 2.0]))

    def forward(self, x):
        scales = self.scales.tolist()
        if scales[:2] != [1, 1]:
            raise NotImplementedError("cannot scale batch or channels")
        return F.interpolate(x, scale_factor=scales[2:], mode="nearest")


class OnnxLikeShape(nn.Module):
    def forward(self, x):
        return torch.tensor(x.shape)


class OnnxLikeReshape(nn.Module):
    """onnx2torch's Reshape: the target shape is a tensor; 0 copies the input's size."""

    def forward(self, x, shape):
        if torch.any(shape == 0):
            shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return torch.reshape(x, torch.Size(shape))


class OnnxLikeSlice(nn.Module):
    """onnx2torch's Slice: bounds from tensors, as numpy integers."""

    def __init__(self, end: int):
        super().__init__()
        self.register_buffer("ends", torch.tensor([end]))

    def forward(self, x):
        end = self.ends.numpy()[0]  # numpy.int64
        return x[:, np.int64(0):end]


class OnnxLikeNet(nn.Module):
    """Conv -> BN -> ReLU -> Resize (x2) -> Reshape to (B, C, H*W) from a Shape tensor -> Slice of the
    first 6 channels -> a MatMul + Add with constant weights (ONNX's linear layer on a sequence)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.resize = OnnxLikeResize()
        self.shape = OnnxLikeShape()
        self.reshape = OnnxLikeReshape()
        self.slice = OnnxLikeSlice(6)
        g = torch.Generator().manual_seed(1)
        self.register_buffer("w", torch.randn(64, 5, generator=g) / 8)  # (H*W, out): x @ w
        self.register_buffer("b", torch.randn(5, generator=g) / 8)
        self.register_buffer("flat", torch.tensor([0, 0, -1]))
        with torch.no_grad():  # (seeded: the layers' own initialisation draws from the global generator)
            self.conv.weight.copy_(torch.randn(8, 3, 3, 3, generator=g) * 0.3)
            self.conv.bias.copy_(torch.randn(8, generator=g) * 0.1)
            self.bn.running_mean.uniform_(-0.2, 0.2, generator=g)
            self.bn.running_var.uniform_(0.5, 2, generator=g)

    def forward(self, x):
        y = self.resize(self.relu(self.bn(self.conv(x))))
        s = self.shape(y)
        target = torch.cat([s[:2], self.flat[2:]])  # (B, C, -1) computed from the shape tensor
        y = self.slice(self.reshape(y, target))
        return torch.add(torch.matmul(y, self.w), self.b)


def _images(n=4, size=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=g) * 2 - 1


def _sqnr(ref, out):
    noise = (ref - out).pow(2).mean().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.pow(2).mean().item() / noise)


def test_the_onnx_like_net_needs_the_third_route():
    """Neither torch.fx nor torch.export captures it (the issue's errors); the real-input trace does."""
    model = OnnxLikeNet().eval()
    graph = capture(model, [_images()])
    (inp,) = graph.input_nodes
    assert inp.framework_attr["size_reason"] == SIZE_REASON
    assert inp.framework_attr["size_ranges"] == {1: (3, 3), 2: (4, 4), 3: (4, 4)}  # the batch stays free
    kinds = {n.type for n in graph if n.kind == NodeKind.MODULE}
    assert {nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.Linear} <= kinds  # layers kept, MatMul + Add a Linear
    assert F.interpolate in {n.type for n in graph}


def test_onnx_like_net_quantizes_exports_and_reloads(tmp_path):
    model = OnnxLikeNet().eval()
    data = [[_images(8, seed=s)] for s in range(3)]
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data))
    x = _images(5, seed=9)  # another batch size than calibrated: the batch is free
    with torch.no_grad():
        ref, out = model(x), q(x)
    assert out.shape == ref.shape == (5, 6, 5)
    assert _sqnr(ref, out) > 20
    for fmt in (mct.exporter.QuantizationFormat.FAKELY_QUANT, mct.exporter.QuantizationFormat.MCTQ):
        path = mct.exporter.pytorch_export_model(q, tmp_path / f"m_{fmt.name}.onnx", lambda: iter(data),
                                                 quantization_format=fmt)
        if fmt == mct.exporter.QuantizationFormat.FAKELY_QUANT:
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            (onnx_out,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})  # dynamic batch
            assert _sqnr(out, torch.from_numpy(onnx_out)) > 30
    loaded = load_quantized_model(save_quantized_model(q, tmp_path / "q.pt"))
    with torch.no_grad():
        assert torch.equal(loaded(x), out)


def test_another_input_shape_than_recorded_is_refused():
    model = OnnxLikeNet().eval()
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[_images()]]))
    with pytest.raises(AssertionError, match="must have exactly 4 in dimension 2: the model was captured by tracing"):
        q(_images(size=8))


class BatchConstant(nn.Module):
    """A constant tensor made from the batch size (torch.zeros(x.shape)): the batch cannot be freed."""

    def __init__(self):
        super().__init__()
        self.resize = OnnxLikeResize()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return self.conv(self.resize(x)) + torch.ones(x.shape[0], 4, 1, 1)


def test_a_batch_dependent_constant_fixes_the_batch():
    graph = capture(BatchConstant().eval(), [_images(3)])
    assert graph.input_nodes[0].framework_attr["size_ranges"][0] == (3, 3)
    q, _ = mct.ptq.pytorch_post_training_quantization(BatchConstant().eval(), lambda: iter([[_images(3)]]))
    with pytest.raises(AssertionError, match="must have exactly 3 in dimension 0"):
        q(_images(2))


class ValueRead(nn.Module):
    """Reads a value computed from the input (a threshold from the data): recording it would be wrong."""

    def __init__(self):
        super().__init__()
        self.resize = OnnxLikeResize()

    def forward(self, x):
        y = self.resize(x)
        return y * float(y.max())


class WriteInto(nn.Module):
    def __init__(self):
        super().__init__()
        self.resize = OnnxLikeResize()

    def forward(self, x):
        y = self.resize(x)
        y[:, 0] = 0
        return y


def test_no_route_error_names_each_route_and_the_construct():
    with pytest.raises(CaptureError) as info:
        capture(ValueRead().eval(), [_images()])
    message = str(info.value)
    assert "torch.fx failed in ValueRead.forward" in message
    assert "torch.export failed" in message
    assert "tracing with the representative inputs failed: ValueRead" in message and "__float__" in message
    assert "return y * float(y.max())" in message  # the source line
    assert "instead of .item()" in message  # what to do
    with pytest.raises(CaptureError, match=r"(?s)x\[index\] = value.*y\[:, 0\] = 0.*torch.where"):
        capture(WriteInto().eval(), [_images()])


class Decomposed(nn.Module):
    """ONNX's spellings of a conv + scale-and-shift, a hard-swish, a SiLU and a LayerNorm, after a slice
    whose end is a numpy integer read from a tensor (so that only the third route captures it)."""

    def __init__(self):
        super().__init__()
        self.slice = OnnxLikeSlice(3)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        g = torch.Generator().manual_seed(2)
        self.register_buffer("scale", torch.rand(1, 8, 1, 1, generator=g) + 0.5)
        self.register_buffer("shift", torch.randn(8, 1, 1, generator=g))
        self.register_buffer("three", torch.tensor(3.0))
        self.register_buffer("six", torch.tensor(6.0))
        self.register_buffer("two", torch.tensor(2.0))
        self.register_buffer("eps", torch.tensor(1e-5))
        self.register_buffer("gamma", torch.rand(16, generator=g) + 0.5)
        self.register_buffer("beta", torch.randn(16, generator=g))
        self.clip = nn.ReLU6()

    def forward(self, x):
        y = torch.add(torch.mul(self.scale, self.conv(self.slice(x))), self.shift)
        y = torch.div(torch.mul(y, self.clip(torch.add(y, self.three))), self.six)  # hard-swish
        y = y * torch.sigmoid(y)  # SiLU
        y = y.flatten(2)  # (B, 8, 16): normalised over the last dimension
        d = torch.sub(y, torch.mean(y, dim=[-1], keepdim=True))
        y = torch.div(d, torch.sqrt(torch.add(torch.mean(torch.pow(d, self.two), dim=[-1], keepdim=True), self.eps)))
        return torch.add(torch.mul(y, self.gamma), self.beta)


def test_decomposed_operations_are_folded_back():
    model = Decomposed().eval()
    x = _images()
    graph = capture(model, [x])
    types = [n.type for n in graph if n.kind != NodeKind.CONSTANT]
    assert types.count(nn.Conv2d) == 1 and F.hardswish in types and F.silu in types and nn.LayerNorm in types
    assert not {torch.mul, torch.add, torch.div, torch.sqrt, torch.pow, torch.mean, torch.sigmoid} & set(types)
    with torch.no_grad():
        assert torch.allclose(build_module(graph)(x), model(x), atol=1e-4)


# ---- the real converted models (onnx2torch on shipped ONNX files) -------------------------------
@pytest.fixture
def one_thread():
    """Small inputs: one thread is several times faster than two on a busy two-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _real_model(name, monkeypatch):
    """The onnx2torch conversion of a shipped ONNX file, and capture with torch.export failing at once, as it
    does on these models after 10-20 s (the benchmark runs the whole chain); skipped without the packages."""
    from benchmarks import real_models
    from hwquant.torch.capture import routes as capture_module
    try:
        model = real_models.onnx2torch_model(name)
    except (FileNotFoundError, ImportError) as e:
        pytest.skip(str(e))

    def export_fails(*args):
        raise RuntimeError("torch.export fails on onnx2torch models")
    monkeypatch.setattr(capture_module, "capture_with_export", export_fails)
    return model


@pytest.mark.parametrize("name, shape", [("ppocr_det_dbnet", (2, 3, 32, 32)), ("ppocr_rec_svtr", (2, 3, 48, 32)),
                                         ("ddddocr_det_yolox", (2, 3, 32, 32))])
def test_real_onnx2torch_models_are_captured(name, shape, one_thread, monkeypatch):
    """PP-OCRv4's DBNet and SVTR recogniser, ddddocr's YOLOX, as onnx2torch converts their shipped files:
    the real-input trace captures them with the batch free, and the graph computes the model."""
    model = _real_model(name, monkeypatch)
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
    graph = capture(model, [x])
    (inp,) = graph.input_nodes
    assert inp.framework_attr["size_reason"] == SIZE_REASON and 0 not in inp.framework_attr["size_ranges"]
    rebuilt = build_module(graph)
    for batch in (x[:1], torch.cat([x, x[:1]])):
        with torch.no_grad():
            assert torch.allclose(rebuilt(batch), model(batch), atol=1e-5)


@pytest.mark.skipif(not os.environ.get("HWQUANT_REAL_E2E"), reason="opt-in (about 10-30 s): set HWQUANT_REAL_E2E=1; "
                    "benchmarks/run_real_models.py quantizes and measures the three models")
def test_real_yolox_quantizes_and_exports(tmp_path, one_thread, monkeypatch):
    """The whole chain on a real converted model: PTQ, ONNX export, the file equal to the simulation."""
    model = _real_model("ddddocr_det_yolox", monkeypatch)
    data = [[torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 255]]
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data))
    x = data[0][0][:1]
    with torch.no_grad():
        ref, out = model(x), q(x)
    assert out.shape == ref.shape == (1, 21, 6)
    path = mct.exporter.pytorch_export_model(q, tmp_path / "m.onnx", lambda: iter(data),
                                             quantization_format=mct.exporter.QuantizationFormat.FAKELY_QUANT)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (onnx_out,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    assert _sqnr(out, torch.from_numpy(onnx_out)) > 30
