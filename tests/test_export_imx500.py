"""MCTQ export for the IMX500 converter: the producer and metadata it checks, the forms it accepts
(linear layers on 4-D token layouts, attention products head by head, GELU as one operator), the
same function as the simulated model, and the export-time warning for what it would refuse.

The real converter runs only where HWQUANT_IMXCONV names its `imxconv-pt` (opt-in: it needs Java and
a minute per model); benchmarks/run_imx500.py converts the full set."""
import copy
import logging
import math

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import hwquant as mct
from hwquant.exporter.imx500 import converter_problems
from hwquant.torch.deployment.export_model import quantizers_of
from hwquant.torch.deployment.imx500_forms import rewrite_for_imx500
from imx_converter import convert, needs_converter

QF = mct.exporter.QuantizationFormat
T, D = 16, 32


class Encoder(nn.Module):
    """Pre-norm transformer block on (N, T, D): 4-head softmax attention, GELU MLP. Its generator over
    the chunks stops torch.fx, so it is captured through torch.export (aten operators)."""

    def __init__(self, act: nn.Module = None):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.act, self.fc2 = nn.Linear(D, 2 * D), act or nn.GELU(), nn.Linear(2 * D, D)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = (z.reshape(n, t, 4, d // 4).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // 4), dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(n, t, d))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class FxEncoder(Encoder):
    """The same block written so that torch.fx traces it (Python operators)."""

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.reshape(n, t, 4, d // 4).transpose(1, 2)
        k = k.reshape(n, t, 4, d // 4).transpose(1, 2)
        v = v.reshape(n, t, 4, d // 4).transpose(1, 2)
        attn = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // 4), dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(n, t, d))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


def _batches(seed=0, n=3, batch=8):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(batch, T, D, generator=g)] for _ in range(n)]


def _quantize(model, tpc_version="4.0", device="imx500"):
    torch.manual_seed(0)
    data = _batches()
    q, _ = mct.ptq.pytorch_post_training_quantization(
        model.eval(), lambda: iter(data),
        target_platform_capabilities=mct.get_target_platform_capabilities(tpc_version, device))
    return q


@pytest.fixture(scope="module", params=[Encoder, FxEncoder], ids=["export-captured", "fx-captured"])
def encoder(request):
    return _quantize(request.param())


def _export(q, path, **kw):
    return onnx.load(mct.exporter.pytorch_export_model(q, path, lambda: iter(_batches()), **kw))


def _matmul_input_ranks(proto):
    """{MatMul node: (rank of input 0, rank of input 1, input 1 from a weights quantizer)} from a run."""
    producers = {o: n for n in proto.graph.node for o in n.output}
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    matmuls = [n for n in proto.graph.node if n.op_type == "MatMul"]
    names = sorted({i for n in matmuls for i in n.input})
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(i, onnx.TensorProto.FLOAT, None) for i in names)
    sess = mct.exporter.mctq_inference_session(probe)
    values = dict(zip([o.name for o in sess.get_outputs()],
                      sess.run(None, {sess.get_inputs()[0].name: _batches(seed=5)[0][0][:1].numpy()})))

    def from_weights(name):  # through the Transpose torch writes for a linear layer's kernel
        node = producers.get(name)
        while node is not None and node.op_type == "Transpose":
            node = producers.get(node.input[0])
        return node is not None and node.op_type.startswith("Weights")

    return {n.name: (values[n.input[0]].ndim, values[n.input[1]].ndim, from_weights(n.input[1])) for n in matmuls}


def test_producer_and_metadata_are_what_the_converter_checks(encoder, tmp_path):
    proto = _export(encoder, tmp_path / "m.onnx")
    assert proto.producer_name == "pytorch" and proto.producer_version == torch.__version__.split("+")[0]
    props = {p.key: p.value for p in proto.metadata_props}
    assert props["tpc_platform_type"] == "imx500" and props["tpc_minor_version"] == "4"
    assert props["tpc_patch_version"] == "0" and props["hwquant_version"] == mct.__version__


def test_transformer_block_in_the_forms_the_converter_accepts(encoder, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hwquant.exporter"):
        proto = _export(encoder, tmp_path / "m.onnx")
    assert "will refuse" not in caplog.text and converter_problems(proto) == []
    ops = [n.op_type for n in proto.graph.node]
    assert next(o.version for o in proto.opset_import if o.domain == "") == 20
    assert ops.count("Gelu") == 1 and "Erf" not in ops
    ranks = _matmul_input_ranks(proto)
    linear = [r for r in ranks.values() if r[2]]
    products = [r for r in ranks.values() if not r[2]]
    assert len(linear) == 4 and all(r[0] in (2, 4) for r in linear)          # qkv, proj, fc1, fc2
    assert len(products) == 2 * 4 and all(r[:2] == (3, 3) for r in products)  # scores and values, per head
    # every head's product is quantized (the converter refuses an unquantized MatMul)
    consumers = {i: n for n in proto.graph.node for i in n.input}
    assert all(consumers[n.output[0]].op_type == "ActivationPOTQuantizer"
               for n in proto.graph.node if n.op_type == "MatMul" and not ranks[n.name][2])


def test_the_exported_forms_compute_the_simulated_function(encoder, tmp_path):
    x = _batches(seed=9, batch=32)[0][0]
    with torch.no_grad():
        ref = encoder(x)
        rewritten = copy.deepcopy(encoder)  # what MCTQ export traces, before its quantizer markers
        assert rewrite_for_imx500(rewritten, [x[:1]]) == 4 + 2
        assert torch.equal(rewritten(x), ref)
    sess = mct.exporter.mctq_inference_session(_export(encoder, tmp_path / "m.onnx"))
    # the whole batch: sizes a torch.export capture reads (aten.sym_size) are traced, not baked in
    out = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    step = next(m for n, m in reversed(list(quantizers_of(encoder).items())) if "holder" in n).grid().scale.item()
    assert (np.abs(out - ref.numpy()) <= step * 1.0001).mean() >= 0.995


def test_qdq_export_is_not_rewritten(encoder, tmp_path):
    proto = _export(encoder, tmp_path / "q.onnx", quantization_format=QF.FAKELY_QUANT)
    sess = mct.exporter.mctq_inference_session(proto)
    assert sess.run(None, {sess.get_inputs()[0].name: _batches(batch=5)[0][0].numpy()})[0].shape == (5, T, D)
    assert next(o.version for o in proto.opset_import if o.domain == "") == 17
    assert sum(n.op_type == "MatMul" for n in proto.graph.node) == 4 + 2


def test_gelu_at_an_opset_without_gelu_is_named_at_export_time(encoder, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hwquant.exporter"):
        proto = _export(encoder, tmp_path / "m.onnx", onnx_opset_version=17)
    assert "Erf" in [n.op_type for n in proto.graph.node] and (tmp_path / "m.onnx").exists()
    assert "IMX500 converter will refuse" in caplog.text and "operator Erf" in caplog.text
    assert "onnx_opset_version=20" in caplog.text


def test_tanh_gelu_needs_no_gelu_operator(tmp_path):
    proto = _export(_quantize(Encoder(nn.GELU(approximate="tanh"))), tmp_path / "m.onnx")
    assert converter_problems(proto) == [] and "Erf" not in [n.op_type for n in proto.graph.node]


def test_a_non_power_of_two_activation_grid_is_named(tmp_path, caplog):
    q = _quantize(Encoder(), tpc_version="1.0", device="tflite")
    with caplog.at_level(logging.WARNING, logger="hwquant.exporter"):
        _export(q, tmp_path / "m.onnx")
    assert "ActivationUniformQuantizer" in caplog.text and "power-of-two" in caplog.text


class CallersWrapper(nn.Module):
    """A caller's module around the quantized model, as Ultralytics puts its NMS layer around it: here a
    post-processing step of its own after the quantized block."""

    def __init__(self, quantized):
        super().__init__()
        self.model = quantized

    def forward(self, x):
        return torch.relu(self.model(x)) * 2.0


def test_the_imx500_forms_reach_a_quantized_model_inside_a_callers_wrapper(encoder, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hwquant.exporter"):
        proto = _export(CallersWrapper(encoder), tmp_path / "wrapped.onnx")
    assert "will refuse" not in caplog.text and converter_problems(proto) == []
    products = [r for r in _matmul_input_ranks(proto).values() if not r[2]]
    assert len(products) == 2 * 4 and all(r[:2] == (3, 3) for r in products)  # head by head, as unwrapped
    props = {p.key: p.value for p in proto.metadata_props}  # the wrapped model's metadata
    assert props["tpc_platform_type"] == "imx500" and props["tpc_minor_version"] == "4"
    x = _batches(seed=4)[0][0][:2]
    sess = mct.exporter.mctq_inference_session(proto)
    with torch.no_grad():
        ref = CallersWrapper(encoder)(x).numpy()
    assert np.abs(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0] - ref).max() <= 0.05 * np.abs(ref).max()


@pytest.mark.parametrize("forced", [False, True], ids=["adds-dynamo-False", "forces-dynamo-True"])
def test_the_export_works_whatever_wrapper_a_caller_puts_around_torch_onnx_export(encoder, tmp_path, monkeypatch,
                                                                                  forced):
    """Ultralytics wraps torch.onnx.export to add dynamo=False to every call (torch >= 2.9): the exporter
    must not go through torch.onnx.export, whose keyword would then come twice."""
    original, calls = torch.onnx.export, []

    def callers_export(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs, dynamo=forced)
    monkeypatch.setattr(torch.onnx, "export", callers_export)
    proto = _export(encoder, tmp_path / "m.onnx")
    assert converter_problems(proto) == [] and any(n.op_type == "ActivationPOTQuantizer" for n in proto.graph.node)
    assert calls == []  # the TorchScript exporter is called directly


def _graph(nodes, inputs, opset=17, initializers=()):
    out = onnx.helper.make_tensor_value_info(nodes[-1].output[0], onnx.TensorProto.FLOAT, None)
    return onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", inputs, [out], list(initializers)),
                                  opset_imports=[onnx.helper.make_opsetid("", opset)])


def test_converter_problems():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 8])
    shape_only = [onnx.helper.make_node("Shape", ["x"], ["s"]),
                  onnx.helper.make_node("ConstantOfShape", ["s"], ["z"]),
                  onnx.helper.make_node("Add", ["x", "z"], ["y"])]
    assert converter_problems(_graph(shape_only, [x])) == []  # folded by the converter before its check
    erf = _graph([onnx.helper.make_node("Erf", ["x"], ["e"], name="gelu_erf"),
                  onnx.helper.make_node("Einsum", ["e", "e"], ["y"], equation="bi,bi->bi")], [x], opset=21)
    problems = "\n".join(converter_problems(erf, tpc_minor_version="7"))
    assert "opset 21" in problems and "TPC minor version 7" in problems
    assert "operator Erf (gelu_erf)" in problems and "operator Einsum" in problems
    fixed = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])
    assert "fixed batch of 4" in converter_problems(_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], [fixed]))[0]




@needs_converter
def test_the_real_converter_accepts_the_transformer_block(encoder, tmp_path):
    _export(encoder, tmp_path / "encoder.onnx")
    assert convert(tmp_path / "encoder.onnx", tmp_path / "out")["Fit In Chip"] is True
