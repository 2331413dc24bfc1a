"""The command line keeps the frameworks' own chatter off its output (TensorFlow's import banners, its C++ log lines,
the TFLite converter's and interpreter's, tf.function's retracing warning) unless --verbose or HWQUANT_DEBUG asks for
it; what else is written, an error included, still comes through. The commands themselves run on Keras' TensorFlow
backend (scripts/test_keras_tensorflow.sh)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from hwquant.cli import quiet
from terminal import on_terminal

CHATTER = [re.compile(p, re.M) for p in (
    r"oneDNN", r"cpu_feature_guard", r"This TensorFlow binary is optimized", r"absl::InitializeLog",
    r"Ignored output_format", r"Ignored drop_control_dependency", r"Reading SavedModel", r"retracing",
    r"XNNPACK delegate", r"^[IWE]\d{4} \d\d:\d\d:", r"WARNING:tensorflow", r"FutureWarning")]


def _chatter(text):
    return [p.pattern for p in CHATTER if p.search(text)]


@pytest.fixture
def quiet_mode(monkeypatch):
    monkeypatch.delenv("HWQUANT_DEBUG", raising=False)
    monkeypatch.setattr(quiet, "_quiet", False)
    quiet.configure(verbose=False)
    yield
    quiet._quiet = False


def test_the_filter_drops_the_chatter_and_keeps_the_rest(quiet_mode, capfd):
    lines = ["WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
             "I0000 00:00:1795910527.114904    2694 port.cc:153] oneDNN custom operations are on.",
             "W0000 00:00:1795910531.212621    2694 tf_tfl_flatbuffer_helpers.cc:364] Ignored output_format.",
             "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",
             "E0000 00:00:1795910531.212621    2694 loader.cc:12] an error of the framework's",
             "something the user's code wrote"]
    with pytest.raises(RuntimeError, match="the step failed"):
        with quiet.filtered_stderr():
            os.write(2, ("\n".join(lines) + "\n").encode())
            raise RuntimeError("the step failed")
    err = capfd.readouterr().err
    assert err.splitlines() == lines[-2:]


def test_verbose_and_hwquant_debug_let_it_through(monkeypatch, capfd):
    monkeypatch.delenv("HWQUANT_DEBUG", raising=False)
    monkeypatch.setattr(quiet, "_quiet", False)
    quiet.configure(verbose=True)
    line = "I0000 00:00:1795910527.114904    2694 port.cc:153] oneDNN custom operations are on."
    with quiet.filtered_stderr():
        os.write(2, (line + "\n").encode())
    assert capfd.readouterr().err.strip() == line
    monkeypatch.setenv("HWQUANT_DEBUG", "1")
    quiet.configure(verbose=False)
    assert not quiet._quiet


def _on_terminal(args, cwd, env):
    code, text = on_terminal(args, cwd, env)
    return code, text.replace("\r", "")


def test_tensorflow_commands_print_their_summary_only(tmp_path):
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow's chatter: on Keras' TensorFlow backend (scripts/test_keras_tensorflow.sh)")
    import hwquant as mct
    from hwquant.cli.tpc import resolve_tpc
    L = keras.layers
    inputs = keras.Input((16, 16, 3))
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 3, padding="same")(inputs)))
    model = keras.Model(inputs, L.Dense(4)(L.GlobalAveragePooling2D()(x)))
    model.save(tmp_path / "m.keras")
    data = np.random.default_rng(0).standard_normal((45, 16, 16, 3)).astype(np.float32)  # (a last, smaller batch)
    np.savez(tmp_path / "calib.npz", data)
    quantized, _ = mct.ptq.keras_post_training_quantization(model, lambda: iter([[data[:16]]]),
                                                            target_platform_capabilities=resolve_tpc("tflite", "--tpc"))
    mct.exporter.keras_export_model(quantized, str(tmp_path / "q.keras"))
    # as a user's shell has it: TensorFlow's own settings unset
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "HWQUANT_DEBUG")}
    env["KERAS_BACKEND"] = "tensorflow"

    command = ["quantize", "m.keras", "--data", "calib.npz", "--tpc", "tflite", "--out", "m.tflite"]
    code, shown = _on_terminal(command, tmp_path, env)
    assert code == 0, shown
    assert not _chatter(shown), shown
    assert "for tflite_tpc: 2 layers' weights quantized" in shown and "wrote        m.tflite" in shown, shown
    assert shown.splitlines()[0] == "reading the model m.keras", shown

    verbose = subprocess.run([sys.executable, "-m", "hwquant", *command, "--verbose", "-q"], capture_output=True,
                             text=True, cwd=tmp_path, env=env)
    assert verbose.returncode == 0, verbose.stderr
    assert "Ignored output_format" in verbose.stderr and "oneDNN" in verbose.stderr, verbose.stderr
    assert "retracing" not in verbose.stderr  # (not hidden: the model is no longer traced again)

    for args in (["export", "q.keras", "q.tflite"], ["export", "q.keras", "q.onnx"],
                 ["check", "q.tflite", "q.keras", "--data", "calib.npz"]):
        run = subprocess.run([sys.executable, "-m", "hwquant", *args], capture_output=True, text=True, cwd=tmp_path,
                             env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        assert not _chatter(run.stdout + run.stderr), run.stdout + run.stderr
    assert "agrees" in run.stdout


def test_errors_still_reach_the_user(tmp_path):
    """A model file that cannot be read, on TensorFlow's first import: the one-line error, no chatter."""
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow's chatter: on Keras' TensorFlow backend (scripts/test_keras_tensorflow.sh)")
    (tmp_path / "broken.keras").write_bytes(b"not a model")
    np.savez(tmp_path / "calib.npz", np.zeros((4, 8, 8, 3), np.float32))
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "HWQUANT_DEBUG")}
    env["KERAS_BACKEND"] = "tensorflow"
    run = subprocess.run([sys.executable, "-m", "hwquant", "quantize", "broken.keras", "--data", "calib.npz", "--tpc",
                          "tflite", "--out", "m.tflite", "-q"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 2 and "cannot read 'broken.keras' as a keras model" in run.stderr, run.stderr
    assert not _chatter(run.stderr), run.stderr
