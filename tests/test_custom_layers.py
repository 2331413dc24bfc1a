"""Models that end in Sony's edge-mdt-cl layers (MulticlassNMS, MulticlassNMSWithIndices, FasterRCNNBoxDecode), as
MCT's ONNX-inference tutorial and Ultralytics' IMX500 export use them: every capture route keeps the layer whole, it is
left float (and said so), the quantized model returns what the float one does (NMSResults), mixed precision and GPTQ
compare the tensors the layer reads, and the MCTQ export writes edge-mdt-cl's own operator, which ONNX Runtime runs
with edge-mdt-cl's custom-op library.

edge-mdt-cl lives in .cache/downstream (scripts/setup.sh, --no-deps). Its NMS calls torchvision's nms operator; where
torchvision cannot load beside the CPU torch wheel (this project's .venv), a plain-torch greedy NMS with torchvision's
semantics stands in for that one operator. Sony's converter runs on the exported file where HWQUANT_IMXCONV names its
`imxconv-pt` (bash benchmarks/setup_imx500.sh installs it in .venv-imx)."""
import logging
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import hwquant as mct
from hwquant.torch.capture.routes import capture
from hwquant.torch.capture.concrete_route import capture_with_concrete_trace
from imx_converter import convert, needs_converter

ROOT = Path(__file__).resolve().parents[1]
DOWNSTREAM = ROOT / ".cache" / "downstream"
N_CLASSES, SIZE = 3, 16


def _greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision.ops.nms: indices of the kept boxes by decreasing score; a box is dropped when its IoU with a kept
    higher-scoring box exceeds the threshold."""
    order = torch.argsort(scores, descending=True, stable=True)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    alive = torch.ones(len(order), dtype=torch.bool)
    keep = []
    for k, i in enumerate(order.tolist()):
        if not alive[k]:
            continue
        keep.append(i)
        rest = order[k + 1:]
        low = torch.maximum(boxes[i, :2], boxes[rest, :2])
        high = torch.minimum(boxes[i, 2:], boxes[rest, 2:])
        inter = (high - low).clamp(min=0).prod(-1)
        alive[k + 1:] &= inter / (area[i] + area[rest] - inter) <= iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _torchvision_ops_load() -> bool:
    try:
        import torchvision  # noqa: F401
        return hasattr(torch.ops.torchvision, "nms")
    except Exception:  # noqa: BLE001 - a CUDA build beside the CPU torch fails in its C extension
        return False


_STAND_IN = []  # the torch.library holding the stand-in operator (kept alive)


@pytest.fixture(scope="module")
def edgemdt():
    assert (DOWNSTREAM / "edgemdt_cl" / "pytorch").exists(), f"{DOWNSTREAM} lacks edge-mdt-cl: run scripts/setup.sh"
    if str(DOWNSTREAM) not in sys.path:
        sys.path.insert(0, str(DOWNSTREAM))
    if not _torchvision_ops_load() and not _STAND_IN:
        for name in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[name]  # a half-loaded torchvision
        library = torch.library.Library("torchvision", "FRAGMENT")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.impl("nms", _greedy_nms, "CPU")
        _STAND_IN.append(library)
    stand_in = types.ModuleType("torchvision")
    stand_in.__version__ = "0.28.0"  # what edge-mdt-cl checks at import
    installed = sys.modules.get("torchvision")
    if installed is None:
        sys.modules["torchvision"] = stand_in
    try:
        import edgemdt_cl.pytorch as edgemdt_cl
    finally:
        if sys.modules.get("torchvision") is stand_in:  # edge-mdt-cl only imports it: other packages see none
            del sys.modules["torchvision"]
    return edgemdt_cl


class Detector(nn.Module):
    """Convolutional backbone, a box head (corner boxes in [0, 1]) and a score head, then the NMS layer."""

    def __init__(self, nms: nn.Module):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.box, self.cls = nn.Conv2d(16, 4, 1), nn.Conv2d(16, N_CLASSES, 1)
        self.nms = nms

    def heads(self, x):
        f = self.backbone(x)
        b = self.box(f).flatten(2).transpose(1, 2)
        corner = torch.sigmoid(b[..., :2])
        boxes = torch.cat([corner, corner + torch.sigmoid(b[..., 2:]) * 0.3], -1)
        return boxes, torch.sigmoid(self.cls(f).flatten(2).transpose(1, 2))

    def forward(self, x):
        return self.nms(*self.heads(x))


class ItemsDetector(Detector):
    """Reads the results by name and returns a plain tuple (Ultralytics' NMSWrapper does so)."""

    def forward(self, x):
        res = self.nms(*self.heads(x))
        return res.boxes, res.scores, res.labels, res.indices, res.n_valid


class BranchyDetector(Detector):
    """Python control flow on a size stops torch.fx; torch.export cannot run edge-mdt-cl's operator (it has no
    shape-only kernel): the real-input trace captures it."""

    def forward(self, x):
        if x.shape[-1] > 8:
            x = x * 1.0
        return super().forward(x)


class DecodeDetector(nn.Module):
    """Box codes decoded against anchors by FasterRCNNBoxDecode, then the NMS layer."""

    def __init__(self, edgemdt_cl):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.box, self.cls = nn.Conv2d(16, 4, 1), nn.Conv2d(16, N_CLASSES, 1)
        side = SIZE // 2
        grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij"), -1)
        corners = grid.reshape(-1, 2).float() / side
        with pytest.warns(DeprecationWarning):  # (edge-mdt-cl deprecates the layer)
            self.decode = edgemdt_cl.FasterRCNNBoxDecode(torch.cat([corners, corners + 0.25], -1), (10, 10, 5, 5),
                                                         (0, 0, 1, 1))
        self.nms = edgemdt_cl.MulticlassNMS(0.3, 0.5, 20)

    def forward(self, x):
        f = self.backbone(x)
        codes = torch.tanh(self.box(f).flatten(2).transpose(1, 2))
        return self.nms(self.decode(codes), torch.sigmoid(self.cls(f).flatten(2).transpose(1, 2)))


def _data(n=2, batch=4):
    g = torch.Generator().manual_seed(0)
    return [[torch.rand(batch, 3, SIZE, SIZE, generator=g)] for _ in range(n)]


def _ptq(model, tpc=None, **kw):
    data = _data()
    if tpc is not None:
        kw["target_platform_capabilities"] = tpc
    return mct.ptq.pytorch_post_training_quantization(model.eval(), lambda: iter(data), **kw)


def _imx500():
    return mct.get_target_platform_capabilities("4.0", "imx500")


def _same_detections(float_out, quant_out, box_tolerance=0.05, score_tolerance=0.03):
    """The quantized model finds the float model's detections: about as many per image, and nine in ten of the float
    ones among the quantized ones with the same label, a close box and a close score (scores that quantization
    brings level may swap places or tip a suppression: a few may differ)."""
    total = matched = 0
    for b in range(len(float_out.n_valid)):
        nf, nq = int(float_out.n_valid[b]), int(quant_out.n_valid[b])
        assert abs(nf - nq) <= max(1, nf // 10), (nf, nq)
        for i in range(nf):
            close = ((quant_out.labels[b, :nq] == float_out.labels[b, i])
                     & ((quant_out.boxes[b, :nq] - float_out.boxes[b, i]).abs().amax(-1) < box_tolerance)
                     & ((quant_out.scores[b, :nq] - float_out.scores[b, i]).abs() < score_tolerance))
            total, matched = total + 1, matched + bool(close.any())
    assert total > 0 and matched >= 0.9 * total, f"{matched} of {total} detections found again"


@pytest.fixture(scope="module")
def detector(edgemdt):
    torch.manual_seed(0)
    return Detector(edgemdt.MulticlassNMS(score_threshold=0.3, iou_threshold=0.5, max_detections=20)).eval()


@pytest.fixture(scope="module")
def quantized_imx500(detector):
    return _ptq(detector, _imx500())


# ---- capture --------------------------------------------------------------------------------------------------------
def test_every_capture_route_keeps_the_layer_whole(edgemdt, detector):
    x = _data()[0]
    for graph in (capture(detector, x), capture_with_concrete_trace(detector, x, "Detector")):
        kept = [n for n in graph if n.opaque]
        assert [(n.name, n.type) for n in kept] == [("nms", edgemdt.MulticlassNMS)]
        assert graph.outputs == "nms"  # the layer's own result: NMSResults
    branchy = BranchyDetector(detector.nms)
    branchy.load_state_dict(detector.state_dict())
    graph = capture(branchy.eval(), x)  # (fx fails, torch.export fails, the real-input trace captures it)
    assert [n.name for n in graph if n.opaque] == ["nms"] and graph.outputs == "nms"


# ---- PTQ ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tpc", [None, "imx500-4.0"])
def test_the_quantized_model_keeps_the_layer_and_finds_the_same_detections(detector, edgemdt, tpc, caplog):
    x = _data()[0][0]
    with caplog.at_level(logging.WARNING, logger="hwquant.float_layers"):
        q, info = _ptq(detector, _imx500() if tpc else None)
    layer = q.get_submodule("nms")
    assert type(layer) is edgemdt.MulticlassNMS and layer.max_detections == 20 and layer.iou_threshold == 0.5
    with torch.no_grad():
        f, r = detector(x), q(x)
    assert type(r) is edgemdt.NMSResults and int(f.n_valid.min()) > 0
    _same_detections(f, r)
    # left float, said once: in UserInformation and in one warning
    assert list(info.float_layers) == ["nms"] and "kept whole" in info.float_layers["nms"]
    assert caplog.text.count("MulticlassNMS: a custom operator kept whole") == 1
    # its inputs are quantized as the layers before it quantize them; its outputs are not quantized
    holders = dict(q.named_modules())
    reads = next(n for n in q.graph.nodes if n.target == "nms").args
    assert all(str(a.target).endswith("_activation_holder_quantizer") for a in reads)
    assert not any(name.startswith("nms") and name != "nms" for name in holders)


def test_the_imx500_tpc_puts_the_layer_in_its_nms_operator_set(detector):
    from hwquant.core.pipeline.stages import prepare
    from hwquant.core.pipeline.state import PipelineState
    from hwquant.torch.adapter import PytorchAdapter

    graph = capture(detector, _data()[0])
    state = PipelineState(graph=graph, adapter=PytorchAdapter(), tpc=_imx500(), core_config=mct.core.CoreConfig())
    prepare(state)
    nms = graph.node("nms")
    assert nms.opset == "CombinedNonMaxSuppression"
    assert not any(c.activation_quantization_cfg.quantized for c in nms.candidates)


def test_results_read_by_name_stay_unquantized(edgemdt):
    torch.manual_seed(1)
    model = ItemsDetector(edgemdt.MulticlassNMSWithIndices(0.3, 0.5, 20)).eval()
    q, info = _ptq(model, _imx500())
    x = _data()[0][0]
    with torch.no_grad():
        f, r = model(x), q(x)
    assert type(r) is tuple and len(r) == 5 and [t.dtype for t in r] == [t.dtype for t in f]
    _same_detections(edgemdt.NMSResults(*f[:3], f[4]), edgemdt.NMSResults(*r[:3], r[4]))
    assert not any("getattr" in name for name, _ in q.named_modules())  # no quantizer on the results
    assert list(info.float_layers) == ["nms"]


def test_box_decoding_then_nms(edgemdt):
    torch.manual_seed(2)
    model = DecodeDetector(edgemdt).eval()
    q, info = _ptq(model, _imx500())
    assert sorted(info.float_layers) == ["decode", "nms"]
    x = _data()[0][0]
    with torch.no_grad():
        f, r = model(x), q(x)
    assert type(q.get_submodule("decode")) is edgemdt.FasterRCNNBoxDecode
    _same_detections(f, r)
    # the box codes the decoder reads stay quantized (the tanh's output), its anchors float
    reads = next(n for n in q.graph.nodes if n.target == "decode").args[0]
    assert reads.target == "tanh_activation_holder_quantizer"
    assert torch.equal(q.get_submodule("decode").anchors, model.decode.anchors)


def test_the_real_input_trace_route_quantizes_too(detector, edgemdt):
    branchy = BranchyDetector(detector.nms)
    branchy.load_state_dict(detector.state_dict())
    q, info = _ptq(branchy, _imx500())
    x = _data()[0][0]
    with torch.no_grad():
        r = q(x)
    assert type(r) is edgemdt.NMSResults
    _same_detections(detector(x), r)


def test_mixed_precision_compares_what_the_layer_reads(detector):
    from hwquant.core.mixed_precision.sensitivity import compared_outputs

    graph = capture(detector, _data()[0])
    assert compared_outputs(graph) == [graph.node("nms").inputs[0], graph.node("nms").inputs[1]]
    ru = mct.core.pytorch_resource_utilization_data(detector, lambda: iter(_data()),
                                                    target_platform_capabilities=_imx500())
    assert ru.weights_memory > 0 and ru.activation_memory > 0
    core = mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(num_of_images=4))
    q, info = _ptq(detector, _imx500(), core_config=core,
                   target_resource_utilization=mct.core.ResourceUtilization(weights_memory=ru.weights_memory * 0.6))
    assert info.final_resource_utilization.weights_memory <= ru.weights_memory * 0.6
    assert min(info.mixed_precision_cfg) < max(info.mixed_precision_cfg)  # some layer took fewer bits
    with torch.no_grad():
        r = q(_data()[0][0])
    assert type(r).__name__ == "NMSResults"


# ---- export ---------------------------------------------------------------------------------------------------------
def _export(q, path):
    data = _data()
    return onnx.load(mct.exporter.pytorch_export_model(q, str(path), lambda: iter(data)))


def test_export_writes_edgemdt_operator_and_onnx_runtime_matches(quantized_imx500, edgemdt, tmp_path, caplog):
    q, _ = quantized_imx500
    with caplog.at_level(logging.WARNING, logger="hwquant.exporter"):
        proto = _export(q, tmp_path / "det.onnx")
    assert "will refuse" not in caplog.text
    nms = [n for n in proto.graph.node if n.domain == "EdgeMDT"]
    assert [n.op_type for n in nms] == ["MultiClassNMS"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nms[0].attribute}
    assert attrs["max_detections"] == 20 and abs(attrs["iou_threshold"] - 0.5) < 1e-6
    assert {o.domain: o.version for o in proto.opset_import}["EdgeMDT"] == 1
    producers = {o: n for n in proto.graph.node for o in n.output}
    assert all(producers[i].op_type == "ActivationPOTQuantizer" for i in nms[0].input)  # inputs quantized
    assert list(nms[0].output) == [o.name for o in proto.graph.output]  # outputs as the layer returns them
    # ONNX Runtime: hwquant's lowering of the quantizers, edge-mdt-cl's library for its operator
    session = mct.exporter.mctq_inference_session(tmp_path / "det.onnx", sess_options=edgemdt.load_custom_ops())
    x = _data()[0][0]
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = q(x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b.numpy().astype(a.dtype))


def test_export_of_box_decoding_and_nms_with_indices(edgemdt, tmp_path):
    torch.manual_seed(2)
    q, _ = _ptq(DecodeDetector(edgemdt), _imx500())
    proto = _export(q, tmp_path / "decode.onnx")
    assert [n.op_type for n in proto.graph.node if n.domain == "EdgeMDT"] == ["FasterRCNNBoxDecode", "MultiClassNMS"]
    session = mct.exporter.mctq_inference_session(tmp_path / "decode.onnx", sess_options=edgemdt.load_custom_ops())
    x = _data()[0][0]
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = q(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b.numpy().astype(a.dtype), atol=1e-6)

    torch.manual_seed(1)
    q, _ = _ptq(ItemsDetector(edgemdt.MulticlassNMSWithIndices(0.3, 0.5, 20)), _imx500())
    proto = _export(q, tmp_path / "indices.onnx")
    assert [n.op_type for n in proto.graph.node if n.domain == "EdgeMDT"] == ["MultiClassNMSWithIndices"]
    session = mct.exporter.mctq_inference_session(tmp_path / "indices.onnx", sess_options=edgemdt.load_custom_ops())
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = q(x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b.numpy().astype(a.dtype))


@needs_converter
@pytest.mark.parametrize("model", ["nms", "box-decode+nms", "nms-with-indices"])
def test_the_real_converter_accepts_the_models_with_their_layers(model, quantized_imx500, edgemdt, tmp_path):
    if model == "nms":
        q, _ = quantized_imx500
    elif model == "box-decode+nms":
        torch.manual_seed(2)
        q, _ = _ptq(DecodeDetector(edgemdt), _imx500())
    else:
        torch.manual_seed(1)
        q, _ = _ptq(ItemsDetector(edgemdt.MulticlassNMSWithIndices(0.3, 0.5, 20)), _imx500())
    _export(q, tmp_path / "det.onnx")
    assert convert(tmp_path / "det.onnx", tmp_path / "out")["Fit In Chip"] is True
    assert "MultiClassNms" in (tmp_path / "out" / "det.pbtxt").read_text()  # the chip's own NMS


def test_gptq_scores_its_layers_on_what_the_nms_layer_reads(detector):
    import warnings

    with warnings.catch_warnings():  # (torch warns when a backward pass runs through edge-mdt-cl's operator)
        warnings.filterwarnings("error", message=".*autograd kernel was not registered.*")
        data = _data()
        q, _ = mct.gptq.pytorch_gradient_post_training_quantization(
            detector, lambda: iter(data), gptq_config=mct.gptq.get_pytorch_gptq_config(n_epochs=1),
            target_platform_capabilities=_imx500())
    with torch.no_grad():
        r = q(data[0][0])
    assert type(r).__name__ == "NMSResults"
    _same_detections(detector(data[0][0]), r)
