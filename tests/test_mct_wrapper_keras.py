"""MCT's one-call wrapper on Keras models (`framework='tensorflow'`, any Keras 3 backend): PTQ, GPTQ and
mixed precision for an IMX500 converter version, exported as a `.keras` file (issue 29, item 4)."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper  # noqa: E402


def _net():
    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3))
    y = layers.Conv2D(16, 3, padding="same", activation="relu", name="c1")(x)
    y = layers.Conv2D(16, 3, padding="same", activation="relu", name="c2")(y)
    y = layers.GlobalAveragePooling2D()(y)
    return keras.Model(x, layers.Dense(10, name="fc")(y))


BATCHES = [np.random.default_rng(i).normal(size=(8, 12, 12, 3)).astype("float32") for i in range(2)]


def _data():
    return iter([[b] for b in BATCHES])


def _run(path, **kwargs):
    params = [["save_model_path", str(path)]] + kwargs.pop("param_items", [])
    return mct.wrapper.MCTWrapper().quantize_and_export(_net(), _data, framework="tensorflow", param_items=params,
                                                        **kwargs)


def _kernels(model):
    return {w.name: w for w in model.layers if isinstance(w, KerasQuantizationWrapper)}


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def test_ptq_quantizes_for_the_converter_version_and_exports_a_keras_file(tmp_path):
    ok, q = _run(tmp_path / "q.keras", param_items=[["sdsp_version", "3.16"]])
    assert ok and set(_kernels(q)) == {"quant_c1", "quant_c2", "quant_fc"}
    assert any(isinstance(layer, KerasActivationQuantizationHolder) for layer in q.layers)
    assert q.hwquant_metadata["tpc_minor_version"] == "4"  # converter 3.16 runs IMX500 TPC 4.0
    loaded = mct.keras_load_quantized_model(tmp_path / "q.keras")
    x = BATCHES[1]
    np.testing.assert_array_equal(numpy(loaded(x)), numpy(q(x)))
    f = numpy(_net()(x))
    assert 10 * np.log10((f ** 2).sum() / ((f - numpy(q(x))) ** 2).sum()) > 20


def test_the_default_path_is_mcts_keras_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = mct.wrapper.MCTWrapper()
    ok, _ = w.quantize_and_export(_net(), _data, framework="tensorflow")
    assert ok and (tmp_path / "qmodel.keras").is_file() and w.params["save_model_path"] == "./qmodel.keras"


def test_mixed_precision_meets_the_compression_ratio(tmp_path):
    tpc = mct.get_target_platform_capabilities_sdsp("3.14")
    full = mct.core.keras_resource_utilization_data(_net(), _data, target_platform_capabilities=tpc)
    ok, q = _run(tmp_path / "q.keras", use_mixed_precision=True,
                 param_items=[["weights_compression_ratio", 0.5], ["num_of_images", 8]])
    wrappers = _kernels(q)
    bits = {n: w.weights_quantizers["kernel"].num_bits for n, w in wrappers.items()}
    sizes = {n: int(np.prod(w.layer.kernel.shape)) for n, w in wrappers.items()}
    assert sum(sizes[n] * bits[n] / 8 for n in bits) <= 0.5 * full.weights_memory
    assert min(bits.values()) < 8 and (tmp_path / "q.keras").is_file()


def test_gptq_trains_the_rounding(tmp_path):
    ok, q = _run(tmp_path / "gptq.keras", method="GPTQ",
                 param_items=[["n_epochs", 10], ["optimizer", keras.optimizers.Adam(learning_rate=0.5)]])
    _, ptq = _run(tmp_path / "ptq.keras")
    gptq_k, ptq_k = (numpy(_kernels(m)["quant_c2"].get_quantized_weights()["kernel"]) for m in (q, ptq))
    assert q.hwquant_metadata["method"] == "gptq" and not np.array_equal(gptq_k, ptq_k)  # the rounding moved
    assert (tmp_path / "gptq.keras").is_file()


@pytest.mark.parametrize("kwargs, match", [
    (dict(param_items=[["save_model_path", "q.onnx"]]), "'.keras' file"),
    (dict(framework="pytorch"), "float_model is a Keras model.*framework='tensorflow'"),
    (dict(method="GPTQ", param_items=[["optimizer", "adam"]]), "keras.optimizers.Optimizer"),
])
def test_bad_arguments_are_refused_and_nothing_is_written(tmp_path, monkeypatch, kwargs, match):
    monkeypatch.chdir(tmp_path)
    kwargs.setdefault("framework", "tensorflow")
    with pytest.raises((ValueError, TypeError), match=match):
        mct.wrapper.MCTWrapper().quantize_and_export(_net(), _data, **kwargs)
    assert not list(tmp_path.iterdir())
