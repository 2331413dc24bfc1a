"""The INT8 TFLite file runs at any batch (issue 29, item 7): its batch is free by default
(`interpreter.resize_tensor_input`, as MCT's files), or fixed with `batch_size=n`; no shape operation
either way, so XNNPACK still takes the graph whole. TensorFlow backend only (scripts/test_keras_tensorflow.sh)."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")

from test_keras_ptq import _batches, _net  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.errors import ExportError  # noqa: E402

KSF, QF = mct.exporter.KerasExportSerializationFormat, mct.exporter.QuantizationFormat

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="TFLite files are written on Keras' TensorFlow backend")


def _flatten_net():
    """A model with the layers whose Keras forms read the batch size from a SHAPE operation."""
    keras.utils.set_random_seed(0)
    L = keras.layers
    x = keras.Input((8, 8, 3))
    y = L.ReLU(6.0)(L.Conv2D(4, 3, strides=2, padding="same")(x))
    y = L.Reshape((-1, 4))(y)                          # (16, 4)
    y = L.Dense(6)(y)                                  # a Dense on a 3-D input
    return keras.Model(x, L.Dense(5)(L.Flatten()(y)))


def _quantized(model, data):
    return mct.ptq.keras_post_training_quantization(model, lambda: iter([[b] for b in data]))[0]


def _ops(tflite):
    from hwquant.keras.tflite_int8 import read_tflite

    flat, kinds = read_tflite(tflite)
    return [kinds[op.opcodeIndex] for op in flat.subgraphs[0].operators]


def _run(path, x, resize=True):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    inp = interpreter.get_input_details()[0]
    if resize:
        interpreter.resize_tensor_input(inp["index"], x.shape)
    interpreter.allocate_tensors()
    delegated = [op["op_name"] for op in interpreter._get_ops_details()].count("DELEGATE")
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), inp, delegated


@pytest.mark.parametrize("make, in_shape", [(_net, (16, 16, 3)), (_flatten_net, (8, 8, 3))])
def test_the_int8_file_resizes_to_any_batch(make, in_shape, tmp_path):
    pytest.importorskip("ai_edge_litert.interpreter")
    rng = np.random.default_rng(1)
    data = [rng.normal(size=(8,) + in_shape).astype("float32") for _ in range(3)]
    quantized = _quantized(make(), data)
    path = mct.exporter.keras_export_model(quantized, tmp_path / "q.tflite", serialization_format=KSF.TFLITE,
                                           quantization_format=QF.INT8)
    ops = _ops(path.read_bytes())
    assert not {"SHAPE", "STRIDED_SLICE", "PACK"} & set(ops), ops
    step = float(quantized.layers[-1].activation_holder_quantizer.grid.scale)
    single = np.concatenate([_run(path, data[1][i:i + 1])[0] for i in range(3)])
    for batch in (1, 3, 7):
        x = data[1][:batch]
        y, inp, delegated = _run(path, x)
        assert list(inp["shape_signature"]) == [-1, *in_shape] and y.shape[0] == batch
        assert delegated == 1  # XNNPACK takes the resized graph whole
        assert np.abs(y - np.asarray(quantized.predict_on_batch(x))).max() <= step * 1.0001
        np.testing.assert_array_equal(y[:min(batch, 3)], single[:min(batch, 3)])  # a sample's result: not the batch's


def test_a_fixed_batch_on_request(tmp_path):
    pytest.importorskip("ai_edge_litert.interpreter")
    data = _batches()
    quantized = _quantized(_net(), data)
    path = mct.exporter.keras_export_model(quantized, tmp_path / "q4.tflite", serialization_format=KSF.TFLITE,
                                           quantization_format=QF.INT8, batch_size=4)
    y, inp, delegated = _run(path, data[1][:4], resize=False)
    assert list(inp["shape"]) == list(inp["shape_signature"]) == [4, 16, 16, 3] and delegated == 1
    assert y.shape == (4, 10)
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(ExportError, match="batch_size must be a positive int"):
            mct.exporter.keras_export_model(quantized, tmp_path / "bad.tflite", serialization_format=KSF.TFLITE,
                                            quantization_format=QF.INT8, batch_size=bad)
    with pytest.raises(ExportError, match="batch_size applies to the TFLITE INT8 file only"):
        mct.exporter.keras_export_model(quantized, tmp_path / "q.keras", batch_size=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q4.tflite"]
