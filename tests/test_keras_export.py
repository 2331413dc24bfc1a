"""mct.exporter.keras_export_model: .keras (MCTQ, fake-quant) on any backend, TFLite on TensorFlow."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")

from test_keras_ptq import _batches, _net  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.errors import ExportError  # noqa: E402
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper, make_quantizer  # noqa: E402
from hwquant.tpc.enums import QuantizationMethod as M  # noqa: E402

KSF, QF = mct.exporter.KerasExportSerializationFormat, mct.exporter.QuantizationFormat


@pytest.fixture(scope="module")
def quantized():
    data = _batches()
    return mct.ptq.keras_post_training_quantization(_net(), lambda: iter([[b] for b in data]))[0]


def _out(model, x):
    return np.asarray(model.predict_on_batch(x))


def test_keras_mctq_and_fake_quant_files(quantized, tmp_path):
    x = _batches()[1]
    path = mct.exporter.keras_export_model(quantized, tmp_path / "q.keras")  # MCTQ: the model as it is
    loaded = mct.keras_load_quantized_model(path)
    np.testing.assert_array_equal(_out(loaded, x), _out(quantized, x))
    assert any(isinstance(layer, KerasQuantizationWrapper) for layer in loaded.layers)
    fq = mct.exporter.keras_export_model(quantized, tmp_path / "fq.keras", quantization_format=QF.FAKELY_QUANT)
    flat = mct.keras_load_quantized_model(fq)
    assert not any(isinstance(layer, KerasQuantizationWrapper) for layer in flat.layers)
    assert any(isinstance(layer, KerasActivationQuantizationHolder) for layer in flat.layers)
    np.testing.assert_allclose(_out(flat, x), _out(quantized, x), atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fq.keras", "q.keras"]  # no temporary left


def test_tflite_fake_quant(quantized, tmp_path):
    x = _batches()[1]
    if keras.backend.backend() != "tensorflow":
        with pytest.raises(ExportError, match="TFLite export needs Keras' TensorFlow backend"):
            mct.exporter.keras_export_model(quantized, tmp_path / "q.tflite", serialization_format=KSF.TFLITE,
                                            quantization_format=QF.FAKELY_QUANT)
        assert not list(tmp_path.iterdir())
        return
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    path = mct.exporter.keras_export_model(quantized, tmp_path / "q.tflite", serialization_format=KSF.TFLITE,
                                           quantization_format=QF.FAKELY_QUANT)
    interpreter = litert.Interpreter(model_path=str(path))
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.resize_tensor_input(inp["index"], x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    step = quantized.get_layer("fc_activation_holder_quantizer").activation_holder_quantizer.grid.scale
    assert np.abs(interpreter.get_tensor(out["index"]) - _out(quantized, x)).max() <= float(step) * 1.0001


def test_onnx_through_keras_export(quantized, tmp_path):
    """Keras' own ONNX export (torch.onnx on torch, tf2onnx on TensorFlow): ONNX Runtime computes what the
    quantized model computes (the quantizers as float operations)."""
    ort = pytest.importorskip("onnxruntime")
    if keras.backend.backend() == "tensorflow":
        pytest.importorskip("tf2onnx")
    x = _batches()[1]
    path = mct.exporter.keras_export_model(quantized, tmp_path / "q.onnx", serialization_format=KSF.ONNX,
                                           quantization_format=QF.FAKELY_QUANT)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y = session.run(None, {session.get_inputs()[0].name: x})[0]
    step = float(quantized.get_layer("fc_activation_holder_quantizer").activation_holder_quantizer.grid.scale)
    assert np.abs(y - _out(quantized, x)).max() <= step * 1.0001
    assert {"Round", "Clip"} <= {node.op_type for node in __import__("onnx").load(str(path)).graph.node}
    assert [p.name for p in tmp_path.iterdir()] == ["q.onnx"]


tensorflow_only = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                     reason="TFLite files are written on Keras' TensorFlow backend")


def _tflite_ops(path):
    from hwquant.keras.tflite_int8 import read_tflite

    flat, kinds = read_tflite(path.read_bytes())
    graph = flat.subgraphs[0]
    return [kinds[op.opcodeIndex] for op in graph.operators], graph


@tensorflow_only
@pytest.mark.parametrize("device", ["imx500", "tflite"])
def test_tflite_int8_is_fully_integer_and_each_layer_within_one_step(device, tmp_path):
    """Every operation between the input QUANTIZE and the output DEQUANTIZE computes on int8 (weights
    int8 per channel, biases int32), with no shape operation (the batch free, size 1), XNNPACK taking the graph
    whole; each quantized tensor within one step of the simulated layer fed the file's own inputs."""
    from hwquant.keras.tflite_int8 import layer_parity

    pytest.importorskip("ai_edge_litert.interpreter")
    data = _batches()
    tpc = mct.get_target_platform_capabilities("1.0", device)
    quantized = mct.ptq.keras_post_training_quantization(_net(), lambda: iter([[b] for b in data]),
                                                         target_platform_capabilities=tpc)[0]
    path = mct.exporter.keras_export_model(quantized, tmp_path / "q.tflite", serialization_format=KSF.TFLITE,
                                           quantization_format=QF.INT8)
    ops, graph = _tflite_ops(path)
    assert ops[0] == "QUANTIZE" and ops[-1] == "DEQUANTIZE" and ops.count("QUANTIZE") == 1
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "MEAN"} <= set(ops) and "FULLY_CONNECTED" not in ops  # Dense: 1x1 conv
    assert not {"SHAPE", "STRIDED_SLICE", "PACK", "FAKE_QUANT"} & set(ops)
    assert list(graph.tensors[graph.inputs[0]].shape) == [1, 16, 16, 3]
    from tensorflow.lite.python import schema_py_generated as schema
    for op in graph.operators[1:-1]:
        types = {graph.tensors[i].type for i in list(op.inputs) + list(op.outputs) if i >= 0}
        assert types <= {schema.TensorType.INT8, schema.TensorType.INT32}
    steps = layer_parity(quantized, path.read_bytes(), data[1][:1])
    assert len(steps) == 7 and max(steps.values()) <= 1 + 1e-3, steps
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    assert [op["op_name"] for op in interpreter._get_ops_details()].count("DELEGATE") == 1  # XNNPACK took it whole


@tensorflow_only
@pytest.mark.parametrize("make, match", [
    (lambda x: KerasActivationQuantizationHolder(make_quantizer(M.POWER_OF_TWO, 4, {"threshold": 1.0, "is_signed": True}),
                                                 name="h4")(x), "'h4' quantizes to 4 bits"),
    (lambda x: keras.layers.Dense(4, name="float_fc")(KerasActivationQuantizationHolder(
        make_quantizer(M.POWER_OF_TWO, 8, {"threshold": 1.0, "is_signed": True}), name="h")(x)),
     "'float_fc'.* keep float weights"),
])
def test_tflite_int8_refuses_what_it_cannot_carry(make, match, tmp_path):
    x = keras.Input((8,))
    model = keras.Model(x, make(x))
    with pytest.raises(ExportError, match=match):
        mct.exporter.keras_export_model(model, tmp_path / "q.tflite", serialization_format=KSF.TFLITE,
                                        quantization_format=QF.INT8)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kwargs, match", [
    (dict(serialization_format=KSF.TFLITE, quantization_format=QF.MCTQ), "TFLITE export does not support .*MCTQ"),
    (dict(quantization_format=QF.INT8), "KERAS export does not support .*INT8.*serialization_format=TFLITE"),
    (dict(save_model_path="q.h5"), "'.keras' name"),
    (dict(serialization_format=KSF.ONNX, quantization_format=QF.MCTQ), "ONNX export does not support .*MCTQ"),
    (dict(serialization_format=KSF.ONNX, quantization_format=QF.FAKELY_QUANT), "'.onnx' name, not 'q.keras'"),
    (dict(is_layer_exportable_fn=lambda layer: not isinstance(layer, KerasQuantizationWrapper)), "refused the layers"),
])
def test_bad_exports_are_refused_before_writing(quantized, tmp_path, kwargs, match):
    path = tmp_path / kwargs.pop("save_model_path", "q.keras")
    with pytest.raises(ExportError, match=match):
        mct.exporter.keras_export_model(quantized, path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_a_float_model_exports_as_a_float_file(tmp_path, caplog):
    """A model without quantization layers (a pruned, fine-tuned float model) is written as the float model,
    as MCT does: .keras (either format), ONNX, and TFLite (fake-quant, on TensorFlow), with one warning each
    that the file is not quantized; INT8 TFLite needs a quantized model and is refused."""
    import logging

    model, x = _net(), _batches()[1]
    ref = _out(model, x)
    for name, kw in (("f.keras", {}), ("fq.keras", {"quantization_format": QF.FAKELY_QUANT})):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hwquant"):
            path = mct.exporter.keras_export_model(model, tmp_path / name, **kw)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "not quantized" in warnings[0] and "float" in warnings[0], warnings
        for loaded in (keras.models.load_model(path), mct.keras_load_quantized_model(path)):
            assert not any(isinstance(layer, (KerasQuantizationWrapper, KerasActivationQuantizationHolder))
                           for layer in loaded.layers)
            np.testing.assert_allclose(_out(loaded, x), ref, rtol=1e-6, atol=1e-6)
    if keras.backend.backend() == "tensorflow":
        pytest.importorskip("tf2onnx")
    ort = pytest.importorskip("onnxruntime")
    path = mct.exporter.keras_export_model(model, tmp_path / "f.onnx", serialization_format=KSF.ONNX,
                                           quantization_format=QF.FAKELY_QUANT)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0], ref, rtol=1e-5, atol=1e-5)
    assert "Round" not in {node.op_type for node in __import__("onnx").load(str(path)).graph.node}  # no quantizer
    with pytest.raises(ExportError, match="not quantized.*INT8 TFLite file needs a quantized model.*FAKELY_QUANT"):
        mct.exporter.keras_export_model(model, tmp_path / "f.tflite", serialization_format=KSF.TFLITE,
                                        quantization_format=QF.INT8)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.keras", "f.onnx", "fq.keras"]
    if keras.backend.backend() == "tensorflow":
        litert = pytest.importorskip("ai_edge_litert.interpreter")
        path = mct.exporter.keras_export_model(model, tmp_path / "f.tflite", serialization_format=KSF.TFLITE,
                                               quantization_format=QF.FAKELY_QUANT)
        interpreter = litert.Interpreter(model_path=str(path))
        interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], x.shape)
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        np.testing.assert_allclose(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), ref,
                                   rtol=1e-4, atol=1e-4)


def test_a_file_saved_on_the_torch_backend_loads_on_any_backend():
    """tests/data holds a quantized model exported on Keras' torch backend (CPU); CI runs this test on torch
    and again on TensorFlow: the same outputs (bitwise on CPU; a GPU's convolutions may flip a rounding:
    at most one output step)."""
    from pathlib import Path
    data = Path(__file__).parent / "data"
    model = mct.keras_load_quantized_model(data / "quantized_on_torch_backend.keras")
    expected = np.load(data / "quantized_on_torch_backend.npz")
    got = np.asarray(model.predict_on_batch(expected["x"]))
    step = float(model.get_layer("fc_activation_holder_quantizer").activation_holder_quantizer.grid.scale)
    assert np.abs(got - expected["y"]).max() <= step * 1.0001 and (got == expected["y"]).mean() >= 0.95


def test_exported_files_get_ordinary_permissions(quantized, tmp_path):
    import os

    from hwquant.fileio import new_file_mode
    path = mct.exporter.keras_export_model(quantized, tmp_path / "q.keras")
    assert os.stat(path).st_mode & 0o777 == new_file_mode()
