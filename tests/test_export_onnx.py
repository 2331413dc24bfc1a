"""ONNX export: parity of the exported file (run in ONNX Runtime) with the simulated model, identical
integer grids, integer kernels, the MCTQ custom ops and their runner, bit widths the opset has no
type for, metadata, and every bad-input path."""
import json
import logging
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

import hwquant as mct
from conftest import ORT_INTEGER_KERNELS_EXACT
from hwquant.core.numerics import quant_math
from hwquant.errors import ExportError
from hwquant.torch.deployment.export_model import quantizers_of
from hwquant.torch.quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper

QF, SF = mct.exporter.QuantizationFormat, mct.exporter.PytorchExportSerializationFormat
MCTQ_OPS = {"WeightsPOTQuantizer", "WeightsSymmetricQuantizer", "WeightsUniformQuantizer", "WeightsLUTPOTQuantizer",
            "WeightsLUTSymmetricQuantizer", "ActivationPOTQuantizer", "ActivationSymmetricQuantizer",
            "ActivationUniformQuantizer"}


class PlainCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu6(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(torch.flatten(x, 1))


class DepthwiseResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.pw = nn.Sequential(nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        y = self.stem(x)
        y = y + self.pw(self.dw(y))
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


class TwoInTwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 3, padding=1)
        self.mix = nn.Conv2d(16, 8, 1)

    def forward(self, x, y):
        z = torch.cat([F.relu(self.a(x)), F.relu(self.b(y))], dim=1)
        m = self.mix(z)
        return m, torch.sigmoid(m.mean(dim=(2, 3)))


def _seeded(cls):
    torch.manual_seed(0)
    model = cls().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


SHAPES = {PlainCNN: [(1, 16, 16)], DepthwiseResidual: [(3, 12, 12)], TwoInTwoOut: [(3, 10, 10), (3, 10, 10)]}


def _data(cls, n=4, batch=8, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return [[scale * torch.randn(batch, *s, generator=g) for s in SHAPES[cls]] for _ in range(n)]


def _gen(cls, **kw):
    data = _data(cls, **kw)
    return lambda: iter(data)


def _quantize(cls, core_config=None, tpc=None):
    kw = {"core_config": core_config} if core_config is not None else {}
    if tpc is not None:
        kw["target_platform_capabilities"] = tpc
    q, _ = mct.ptq.pytorch_post_training_quantization(_seeded(cls), _gen(cls), **kw)
    return q


@pytest.fixture(scope="module")
def quantized():
    return {cls: _quantize(cls) for cls in SHAPES}


def _run(sess, inputs):
    return sess.run(None, {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)})


def _output_steps(q):
    """Scale of the quantizer on each model output, in output order."""
    out_node = next(n for n in q.graph.nodes if n.op == "output")
    leaves = torch.utils._pytree.tree_leaves(out_node.args[0])
    return [q.get_submodule(n.target).activation_holder_quantizer.scale.item() for n in leaves]


def _assert_parity(q, sess, inputs, min_fraction=0.999, min_identical=0.0):
    """At least `min_fraction` of the outputs within one step of the output quantizer of the simulated
    model's, and at least `min_identical` bitwise equal."""
    with torch.no_grad():
        ref = torch.utils._pytree.tree_leaves(q(*inputs))
    for r, o, step in zip(ref, _run(sess, inputs), _output_steps(q)):
        within = np.abs(o - r.numpy()) <= step * 1.0001
        assert within.mean() >= min_fraction, f"only {within.mean():.4%} within one step"
        assert (o == r.numpy()).mean() >= min_identical, f"only {(o == r.numpy()).mean():.4%} identical"


def _export(q, path, cls, **kw):
    return mct.exporter.pytorch_export_model(q, path, _gen(cls), **kw)


# ----------------------------------------------------------------------------- QDQ
@pytest.mark.parametrize("cls", list(SHAPES))
def test_qdq_export_runs_on_integer_kernels_and_matches_the_simulation(quantized, cls, tmp_path):
    q = quantized[cls]
    path = _export(q, tmp_path / "m.onnx", cls, quantization_format=QF.FAKELY_QUANT)
    model = onnx.load(path)
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops and not any(n.domain for n in model.graph.node)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    fused = {n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node}
    assert "QLinearConv" in fused and "Conv" not in fused  # every convolution runs in integers
    fresh = _data(cls, n=1, batch=64, seed=123)[0]
    # the simulation runs convolutions as integer kernels do (core.integer_accumulation): with
    # power-of-two activation scales ONNX Runtime's int8 kernels give the very same outputs, on CPUs whose
    # kernels add exactly (conftest.ORT_INTEGER_KERNELS_EXACT); elsewhere the file's own QDQ function is compared
    if not ORT_INTEGER_KERNELS_EXACT:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # conftest: no fusion here
    _assert_parity(q, sess, fresh, min_identical=0.999)


def test_weights_are_stored_as_integers_on_the_simulated_grid(quantized, tmp_path):
    q = quantized[DepthwiseResidual]
    model = onnx.load(_export(q, tmp_path / "m.onnx", DepthwiseResidual, quantization_format=QF.FAKELY_QUANT))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert not [n for n, a in inits.items() if a.dtype == np.float32 and a.ndim == 4]  # no float kernels left
    checked = 0
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0].endswith(".weight_quantized"):
            module = node.input[0][:-len(".weight_quantized")].removesuffix(".layer")
            wrapper = q.get_submodule(module)
            quantizer, weight = wrapper.weights_quantizers["weight"], wrapper.weight.detach()
            ints, scale = inits[node.input[0]], inits[node.input[1]]
            assert ints.dtype == np.int8
            np.testing.assert_array_equal(ints, quant_math.quantize(weight.numpy(), quantizer.grid()))
            np.testing.assert_array_equal(scale, quantizer.scale.numpy())
            channels = (-1,) + (1,) * (ints.ndim - 1)
            zp = inits[node.input[2]].astype(np.float32).reshape(channels)
            dequantized = (ints.astype(np.float32) - zp) * scale.reshape(channels)
            np.testing.assert_array_equal(dequantized, quantizer(weight).numpy())  # bitwise the simulated weights
            checked += 1
    assert checked == sum(isinstance(m, PytorchQuantizationWrapper) for m in q.modules()) == 4


def test_activation_grids_are_the_simulated_ones(quantized, tmp_path):
    q = quantized[DepthwiseResidual]
    model = onnx.load(_export(q, tmp_path / "m.onnx", DepthwiseResidual, quantization_format=QF.FAKELY_QUANT))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    holders = {n: m.activation_holder_quantizer for n, m in q.named_modules()
               if isinstance(m, PytorchActivationQuantizationHolder)}
    output_holder = next(n for n in q.graph.nodes if n.op == "output").args[0].target
    seen = set()
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        match = re.search(r"/(\w+_activation_holder_quantizer)/", node.input[1])
        name = match.group(1) if match else (output_holder if node.input[1].startswith("output_0") else None)
        if name is None:
            continue
        sim = holders[name]
        scale, zp = inits[node.input[1]], inits[node.input[2]]
        assert zp.dtype == np.uint8  # one activation type: ONNX Runtime fuses only same-typed groups
        assert scale.item() == sim.scale.item()
        assert zp.item() - 0 == sim.zero_point.item() - sim.grid().qmin  # the same grid, shifted to start at 0
        seen.add(name)
    assert seen == set(holders)


def test_relu6_becomes_an_integer_clip(tmp_path):
    # inputs large enough that ReLU6's output threshold is 8: 6 is then a grid point inside the range
    q, _ = mct.ptq.pytorch_post_training_quantization(_seeded(PlainCNN), _gen(PlainCNN, scale=20.0))
    model = onnx.load(_export(q, tmp_path / "m.onnx", PlainCNN, quantization_format=QF.FAKELY_QUANT))
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert clips and all(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == n.input[2])).dtype
                         == np.uint8 for n in clips)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _assert_parity(q, sess, _data(PlainCNN, n=1, batch=64, seed=5, scale=20.0)[0])


def test_export_leaves_the_model_as_it_was(quantized, tmp_path):
    q = quantized[PlainCNN]
    x = _data(PlainCNN, n=1, seed=9)[0]
    before, n_quantizers = q(*x), len(quantizers_of(q))
    _export(q, tmp_path / "m.onnx", PlainCNN)
    assert torch.equal(before, q(*x))
    assert len(quantizers_of(q)) == n_quantizers


# ----------------------------------------------------------------------------- bit widths and methods
def _core(**kw):
    return mct.core.CoreConfig(mct.core.QuantizationConfig(**kw))


def test_16_bit_activations_as_integers_at_opset_21_and_as_float_ops_before(tmp_path, caplog):
    q = _quantize(DepthwiseResidual, _core(activation_n_bits=16))
    x = _data(DepthwiseResidual, n=1, batch=32, seed=3)[0]
    m21 = onnx.load(_export(q, tmp_path / "a.onnx", DepthwiseResidual, quantization_format=QF.FAKELY_QUANT,
                            onnx_opset_version=21))
    zps = [numpy_helper.to_array(t) for t in m21.graph.initializer if t.name.endswith("_zero_point")]
    assert any(z.dtype == np.uint16 for z in zps)
    _assert_parity(q, ort.InferenceSession(m21.SerializeToString(), providers=["CPUExecutionProvider"]), x)
    with caplog.at_level(logging.WARNING, logger="hwquant.exporter"):
        m17 = onnx.load(_export(q, tmp_path / "b.onnx", DepthwiseResidual, quantization_format=QF.FAKELY_QUANT))
    assert "opset 21 has 16-bit types" in caplog.text
    assert "Round" in {n.op_type for n in m17.graph.node}
    _assert_parity(q, ort.InferenceSession(m17.SerializeToString(), providers=["CPUExecutionProvider"]), x)
    with pytest.raises(ExportError, match="within 8 bits"):
        _export(q, tmp_path / "c.onnx", DepthwiseResidual, quantization_format=QF.INT8)


def test_4_bit_grids_are_clipped_in_their_8_bit_type(tmp_path):
    q = _quantize(PlainCNN, _core(activation_n_bits=4, weights_n_bits=4))
    model = onnx.load(_export(q, tmp_path / "m.onnx", PlainCNN, quantization_format=QF.INT8))
    weights = [numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith("weight_quantized")]
    assert weights and all(w.dtype == np.int8 and w.min() >= -8 and w.max() <= 7 for w in weights)
    assert any(n.op_type == "Clip" for n in model.graph.node)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _assert_parity(q, sess, _data(PlainCNN, n=1, batch=64, seed=4)[0])


@pytest.mark.parametrize("method", [mct.QuantizationMethod.UNIFORM, mct.QuantizationMethod.SYMMETRIC])
def test_uniform_and_symmetric_grids(method, tmp_path):
    q = _quantize(DepthwiseResidual, _core(activation_quantization_method=method, weights_quantization_method=method))
    x = _data(DepthwiseResidual, n=1, batch=64, seed=6)[0]
    for fmt in (QF.FAKELY_QUANT, QF.MCTQ):
        path = _export(q, tmp_path / f"{fmt.name}.onnx", DepthwiseResidual, quantization_format=fmt)
        _assert_parity(q, mct.exporter.mctq_inference_session(path), x)


def test_lookup_table_weights(tmp_path):
    q = _quantize(PlainCNN, _core(weights_quantization_method=mct.QuantizationMethod.LUT_SYM_QUANTIZER, weights_n_bits=4))
    x = _data(PlainCNN, n=1, batch=64, seed=7)[0]
    qdq = onnx.load(_export(q, tmp_path / "a.onnx", PlainCNN, quantization_format=QF.FAKELY_QUANT))
    _assert_parity(q, ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"]), x)
    mctq = onnx.load(_export(q, tmp_path / "b.onnx", PlainCNN, quantization_format=QF.MCTQ))
    lut_nodes = [n for n in mctq.graph.node if n.op_type == "WeightsLUTSymmetricQuantizer"]
    assert len(lut_nodes) == 3 and all(len(n.input) == 3 for n in lut_nodes)
    _assert_parity(q, mct.exporter.mctq_inference_session(mctq), x)
    with pytest.raises(ExportError, match="within 8 bits"):
        _export(q, tmp_path / "c.onnx", PlainCNN, quantization_format=QF.INT8)


# ----------------------------------------------------------------------------- MCTQ
def test_mctq_custom_ops_attributes_and_runner(quantized, tmp_path):
    q = quantized[DepthwiseResidual]
    model = onnx.load(_export(q, tmp_path / "m.onnx", DepthwiseResidual))  # MCTQ is the default format
    assert any(o.domain == "mct_quantizers" for o in model.opset_import)
    custom = [n for n in model.graph.node if n.domain == "mct_quantizers"]
    n_quantizers = len(quantizers_of(q))
    assert {n.op_type for n in custom} <= MCTQ_OPS and len(custom) == n_quantizers
    for n in custom:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["num_bits"] == 8 and attrs["signed"] in (0, 1)
        if n.op_type == "ActivationPOTQuantizer":
            assert np.log2(attrs["threshold"]) == round(np.log2(attrs["threshold"]))
        if n.op_type == "WeightsSymmetricQuantizer":
            assert attrs["per_channel"] == 1 and attrs["channel_axis"] == 0 and len(n.input) == 2
            assert next(t for t in model.graph.initializer if t.name == n.input[1]).dims[0] in (16, 5)
    _assert_parity(q, mct.exporter.mctq_inference_session(tmp_path / "m.onnx"),
                   _data(DepthwiseResidual, n=1, batch=64, seed=8)[0])


def test_mctq_runner_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(ExportError, match="no ONNX file"):
        mct.exporter.mctq_inference_session(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x01\x02not a model")
    with pytest.raises(ExportError, match="not a readable ONNX model"):
        mct.exporter.mctq_inference_session(tmp_path / "junk.onnx")
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    t = onnx.helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    node = onnx.helper.make_node("WeightsPOTQuantizer", ["x", "t"], ["y"], domain="mct_quantizers", num_bits=8,
                                 signed=1, per_channel=0, channel_axis=0)
    model = onnx.helper.make_model(onnx.helper.make_graph([node], "g", [x, t], [y]),
                                   opset_imports=[onnx.helper.make_opsetid("", 17),
                                                  onnx.helper.make_opsetid("mct_quantizers", 1)])
    with pytest.raises(ExportError, match="is not a constant"):
        mct.exporter.mctq_inference_session(model)


# ----------------------------------------------------------------------------- metadata, TorchScript
def test_metadata_in_the_onnx_file(quantized, tmp_path):
    model = onnx.load(_export(quantized[PlainCNN], tmp_path / "m.onnx", PlainCNN, quantization_format=QF.FAKELY_QUANT))
    props = {p.key: p.value for p in model.metadata_props}
    assert props["hwquant_version"] == mct.__version__
    assert props["tpc_name"] == "imx500_tpc" and props["tpc_version"] == "1.0"
    assert props["quantization_format"] == "FAKELY_QUANT"
    assert json.loads(props["quantization_config"])["activation_error_method"] == "MSE"
    # the IMX500 converter accepts only PyTorch as the producer (>= 2.0); the toolkit is in the metadata
    assert model.producer_name == "pytorch" and model.producer_version == torch.__version__.split("+")[0]


def test_torchscript_round_trip_with_metadata(quantized, tmp_path):
    q = quantized[TwoInTwoOut]
    path = mct.exporter.pytorch_export_model(q, tmp_path / "m.pt", _gen(TwoInTwoOut), serialization_format=SF.TORCHSCRIPT,
                                             quantization_format=QF.FAKELY_QUANT)
    extra = {"hwquant_metadata.json": ""}
    loaded = torch.jit.load(str(path), _extra_files=extra)
    assert json.loads(extra["hwquant_metadata.json"])["serialization_format"] == "TORCHSCRIPT"
    x = _data(TwoInTwoOut, n=1, batch=16, seed=11)[0]
    for a, b in zip(q(*x), loaded(*x)):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------- bad input
def test_unsupported_combinations_and_values(quantized, tmp_path):
    q = quantized[PlainCNN]
    with pytest.raises(ExportError, match="TORCHSCRIPT export does not support quantization_format=MCTQ"):
        _export(q, tmp_path / "m.pt", PlainCNN, serialization_format=SF.TORCHSCRIPT, quantization_format=QF.MCTQ)
    with pytest.raises(ExportError, match="serialization_format must be one of"):
        _export(q, tmp_path / "m.onnx", PlainCNN, serialization_format="KERAS")
    with pytest.raises(ExportError, match="quantization_format must be one of"):
        _export(q, tmp_path / "m.onnx", PlainCNN, quantization_format=7)
    for bad in (12, "17", 17.0, True):
        with pytest.raises(ExportError, match="onnx_opset_version must be an int >= 13"):
            _export(q, tmp_path / "m.onnx", PlainCNN, onnx_opset_version=bad)
    # integer values and names of the enums are accepted
    assert _export(q, tmp_path / "ok.onnx", PlainCNN, serialization_format=1, quantization_format="FAKELY_QUANT").exists()
    assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "m.pt").exists()


def test_bad_paths(quantized, tmp_path):
    q = quantized[PlainCNN]
    with pytest.raises(ExportError, match="does not exist; create it first"):
        _export(q, tmp_path / "nowhere" / "m.onnx", PlainCNN)
    with pytest.raises(ExportError, match="is a folder"):
        _export(q, tmp_path, PlainCNN)
    with pytest.raises(ExportError, match="must be a file path"):
        _export(q, None, PlainCNN)


@pytest.mark.parametrize("cls", [PlainCNN, DepthwiseResidual])
def test_a_float_model_exports_as_a_float_file(cls, tmp_path, caplog):
    """A model without quantizers (MCT's pruning tutorial exports its pruned, fine-tuned float model) is written
    as the float model, as MCT does: a plain ONNX graph that ONNX Runtime runs as the model computes, its
    metadata saying FLOAT, and one warning that the file is not quantized."""
    model = _seeded(cls)
    inputs = _data(cls, n=1, seed=3)[0]
    with torch.no_grad():
        ref = model(*inputs).numpy()
    for name, kw in (("mctq.onnx", {}), ("fq.onnx", {"quantization_format": QF.FAKELY_QUANT})):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hwquant"):
            path = _export(model, tmp_path / name, cls, **kw)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "not quantized" in warnings[0] and "float" in warnings[0], warnings
        proto = onnx.load(str(path))
        assert {p.key: p.value for p in proto.metadata_props}["quantization_format"] == "FLOAT"
        assert not {n.op_type for n in proto.graph.node} & (MCTQ_OPS | {"QuantizeLinear", "DequantizeLinear"})
        assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)
        out = _run(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), inputs)[0]
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    script = _export(model, tmp_path / "m.pt", cls, serialization_format=SF.TORCHSCRIPT,
                     quantization_format=QF.FAKELY_QUANT)
    with torch.no_grad():
        np.testing.assert_allclose(torch.jit.load(str(script))(*inputs).numpy(), ref, rtol=1e-6, atol=1e-6)
    assert model.training is False and not quantizers_of(model)  # the model itself is left as it was


def test_a_float_model_is_refused_where_a_float_file_makes_no_sense(tmp_path):
    with pytest.raises(ExportError, match="not quantized.*INT8 file needs a quantized model.*MCTQ or FAKELY_QUANT"):
        _export(_seeded(PlainCNN), tmp_path / "m.onnx", PlainCNN, quantization_format=QF.INT8)
    with pytest.raises(ExportError, match="torch.nn.Module quantized by hwquant"):
        _export("model.onnx", tmp_path / "m.onnx", PlainCNN)
    assert list(tmp_path.iterdir()) == []


def test_bad_representative_dataset(quantized, tmp_path):
    with pytest.raises(Exception, match="representative"):
        mct.exporter.pytorch_export_model(quantized[PlainCNN], tmp_path / "m.onnx", lambda: iter([]))
    assert not (tmp_path / "m.onnx").exists()


def test_a_failed_export_leaves_no_file_and_keeps_the_old_one(quantized, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"previous export")

    def broken(*a, **k):
        raise onnx.checker.ValidationError("simulated failure")

    monkeypatch.setattr(onnx.checker, "check_model", broken)
    with pytest.raises(ExportError, match="does not validate"):
        _export(quantized[PlainCNN], path, PlainCNN)
    assert path.read_bytes() == b"previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_mctq_file_runs_with_mct_quantizers_session_options(quantized, tmp_path):
    # what MCT's tutorials do with an exported MCTQ model: onnxruntime with mct-quantizers' custom ops
    pytest.importorskip("onnxruntime_extensions")
    import mct_quantizers
    q = quantized[DepthwiseResidual]
    path = _export(q, tmp_path / "m.onnx", DepthwiseResidual)
    sess = ort.InferenceSession(str(path), mct_quantizers.get_ort_session_options(),
                                providers=["CPUExecutionProvider"])
    _assert_parity(q, sess, _data(DepthwiseResidual, n=1, batch=16, seed=9)[0])


# ----------------------------------------------------------------------------- MCT's signature
@pytest.mark.parametrize("fmt", [QF.MCTQ, QF.FAKELY_QUANT])
def test_output_names_name_the_onnx_outputs(quantized, tmp_path, fmt):
    q = quantized[TwoInTwoOut]
    path = _export(q, tmp_path / "m.onnx", TwoInTwoOut, quantization_format=fmt, output_names=["boxes", "scores"])
    assert [o.name for o in onnx.load(path).graph.output] == ["boxes", "scores"]
    with pytest.raises(ExportError, match="output_names has 1 names"):
        _export(q, tmp_path / "n.onnx", TwoInTwoOut, output_names=["boxes"])
    assert not (tmp_path / "n.onnx").exists()


def test_torchscript_ignores_output_names_with_a_warning(quantized, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="hwquant.exporter"):
        _export(quantized[TwoInTwoOut], tmp_path / "m.pt", TwoInTwoOut, serialization_format=SF.TORCHSCRIPT,
                quantization_format=QF.FAKELY_QUANT, output_names=["a", "b"])
    assert "output_names only name ONNX outputs" in caplog.text


def test_is_layer_exportable_fn_is_called_on_each_layer_and_can_refuse(quantized, tmp_path):
    q = quantized[PlainCNN]
    seen = []
    _export(q, tmp_path / "m.onnx", PlainCNN, is_layer_exportable_fn=lambda layer: seen.append(layer) or True)
    assert seen == list(q.children())
    assert all(mct.exporter.is_pytorch_layer_exportable(layer) for layer in q.children())
    with pytest.raises(ExportError, match="refused the layers"):
        _export(q, tmp_path / "n.onnx", PlainCNN, is_layer_exportable_fn=lambda layer: not hasattr(layer, "weights_quantizers"))
    assert not (tmp_path / "n.onnx").exists()


def test_a_format_given_where_mct_has_is_layer_exportable_fn_is_explained(quantized, tmp_path):
    with pytest.raises(ExportError, match="fourth positional argument is is_layer_exportable_fn"):
        mct.exporter.pytorch_export_model(quantized[PlainCNN], tmp_path / "m.onnx", _gen(PlainCNN), SF.ONNX)


def test_exported_files_get_ordinary_permissions(quantized, tmp_path):
    # written through a temporary file (0600 when made): the file ends with the mode of any new file
    import os

    from hwquant.fileio import new_file_mode
    path = _export(quantized[PlainCNN], tmp_path / "m.onnx", PlainCNN)
    assert os.stat(path).st_mode & 0o777 == new_file_mode()


@pytest.mark.parametrize("kind", ["tuple", "dict", "nested", "dict_nested"])
@pytest.mark.parametrize("fmt", ["MCTQ", "FAKELY_QUANT", "INT8"])
def test_multi_head_models_export_every_head(kind, fmt, tmp_path):
    """Heads of different widths and ranks, returned as tuples, dicts or nested: the ONNX file has one
    output per head, in the model's order, computing what the quantized model computes."""
    from test_ptq import FACES, leaves, multi_head_quantized

    from hwquant.exporter.onnx_runtime import mctq_inference_session

    q = multi_head_quantized(kind)
    path = mct.exporter.pytorch_export_model(q, tmp_path / f"{kind}.onnx", lambda: iter(FACES),
                                             quantization_format=getattr(mct.exporter.QuantizationFormat, fmt))
    x = torch.randn(4, 3, 24, 24, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        heads, _ = leaves(q(x))
    session = mctq_inference_session(str(path))
    outs = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert [o.shape for o in outs] == [tuple(h.shape) for h in heads]
    for o, h in zip(outs, heads):
        np.testing.assert_allclose(o, h.numpy(), atol=1e-5)
