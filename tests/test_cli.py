"""The command line (hwquant.cli), as a user runs it: saved models and data files in, the report out."""
import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import hwquant as mct
from hwquant.cli import main

SPECS = [("conv", 8, 3), ("bn",), ("relu",), ("conv", 8, 3), ("relu",)]
IN_SHAPE = (3, 10, 10)


@pytest.fixture
def saved(kit, tmp_path):
    model = kit.model(IN_SHAPE, SPECS)
    batches = kit.batches(IN_SHAPE, n=2, batch=8, seed=1)
    q, _ = kit.ptq(model, batches)
    if kit.name == "torch":
        import torch
        torch.save(model, tmp_path / "float.pt")
        float_path = tmp_path / "float.pt"
        quantized_path = mct.exporter.save_quantized_model(q, tmp_path / "quantized.pt")
    else:
        float_path = tmp_path / "float.keras"
        model.save(float_path)
        quantized_path = mct.exporter.keras_export_model(q, tmp_path / "quantized.keras")
    np.savez(tmp_path / "data.npz", np.concatenate([np.asarray(b[0]) for b in batches]))
    return str(float_path), str(quantized_path), str(tmp_path / "data.npz")


def test_report_command_writes_the_report_and_prints_its_summary(saved, tmp_path):
    float_path, quantized_path, data = saved
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["report", float_path, quantized_path, "--data", data, "--report-dir", str(out),
                                       "--batch-size", "8", "--measure-fixes", "1"])
    assert result.exit_code == 0, result.output
    assert "output SQNR (representative)" in result.output and "report.html" in result.output
    report = json.loads((out / "report.json").read_text())
    assert report["baseline"] is not None and any(f["measured"] for f in report["fixes"])
    assert (out / "quant_report.json").is_file() and (out / "troubleshoot_report.json").is_file()


def test_report_command_says_what_is_wrong(saved, tmp_path):
    float_path, quantized_path, data = saved
    runner = CliRunner()
    result = runner.invoke(main, ["report", float_path, quantized_path, "--data", str(tmp_path / "none.npz"),
                                  "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "cannot read" in result.output
    np.save(tmp_path / "empty.npy", np.zeros((0, 3)))
    result = runner.invoke(main, ["report", float_path, quantized_path, "--data", str(tmp_path / "empty.npy"),
                                  "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "no samples" in result.output
    result = runner.invoke(main, ["report", float_path, str(tmp_path / "missing.pt"), "--data", data,
                                  "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "no file" in result.output


def test_python_m_hwquant_help_explains_every_option():
    out = subprocess.run([sys.executable, "-m", "hwquant", "report", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for option in ("--data", "--val-data", "--report-dir", "--batch-size", "--max-batches", "--troubleshoot",
                   "--measure-fixes", "--zscore", "--degrade-ratio", "--tpc-version", "--device-type", "--html",
                   "--tensorboard"):
        assert option in out


def _hwquant(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "hwquant", *args], capture_output=True, text=True, cwd=cwd)


def test_tpc_list_show_export_check(tmp_path):
    """`hwquant tpc` as a user runs it: the shipped platforms listed, one shown, exported to JSON, the file checked
    and shown as the same platform; bad names, bad files and unwritable folders: one clear error, exit 2."""
    listed = _hwquant("tpc", "list")
    assert listed.returncode == 0 and "imx500:1.0  (default)" in listed.stdout and "tflite:1.0" in listed.stdout
    shown = _hwquant("tpc", "show", "imx500:4.0")
    assert shown.returncode == 0
    assert "W8A8 | W4A8 | W2A8 | W8A16 | W4A16 | W2A16" in next(line for line in shown.stdout.splitlines()
                                                                 if line.strip().startswith("Conv "))
    exported = tmp_path / "imx500_4.json"
    assert _hwquant("tpc", "export", "imx500:4.0", str(exported)).returncode == 0
    checked = _hwquant("tpc", "check", str(exported))
    assert checked.returncode == 0 and checked.stdout.startswith(f"valid: {exported}")
    assert checked.stdout.split("\n", 1)[1] == shown.stdout  # the file is the same platform
    from hwquant.tpc.serialization import load_target_platform_capabilities
    assert load_target_platform_capabilities(str(exported)) == mct.get_target_platform_capabilities("4.0", "imx500")
    runner = CliRunner()
    for args, message in ((["tpc", "show", "imx501:1.0"], "no target platform 'imx501'"),
                          (["tpc", "show", "tflite:2.0"], "tflite has no TPC version '2.0'"),
                          (["tpc", "export", "imx500", str(tmp_path / "missing" / "t.json")], "cannot write into"),
                          (["tpc", "check", str(tmp_path / "none.json")], "does not exist")):
        result = runner.invoke(main, args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
    broken = tmp_path / "broken.json"
    broken.write_text(exported.read_text()[:200])
    result = runner.invoke(main, ["tpc", "check", str(broken)])
    assert result.exit_code == 2 and "is not valid JSON" in result.output
    assert not (tmp_path / "missing").exists()
    assert runner.invoke(main, ["tpc", "--help"]).exit_code == 0


# ---- hwquant quantize / export / check, as a user runs them -------------------------------------------------
TESTS = __import__("pathlib").Path(__file__).parent
needs_torch = pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None,
                                 reason="the PyTorch command-line cases need torch (this venv runs Keras only)")


def _images(folder, n=24, size=(16, 16), seed=0, mixed=False):
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        w, h = (size[0] + 4 * (i % 2), size[1]) if mixed else size
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"img_{i:03d}.png")
    return folder


def _cli(*args, cwd=TESTS, env=None):
    import os
    return subprocess.run([sys.executable, "-m", "hwquant", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})})


@needs_torch
def test_quantize_a_torch_model_from_an_image_folder_then_export_and_check(tmp_path):
    """The whole job from files: a model factory and a folder of images in; the MCTQ ONNX file, the summary
    (what was quantized, time, memory against float, held-out SQNR and agreement) out; then the saved model
    exported to QDQ ONNX and TorchScript and each file checked against the simulated model."""
    images = _images(tmp_path / "images")
    onnx_path = tmp_path / "small.onnx"
    run = _cli("quantize", "cli_models:small_cnn", "--data", images, "--tpc", "imx500:4.0", "--out", onnx_path,
               "--batch-size", "8")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "Sequential (pytorch) for imx500_tpc: 4 layers' weights quantized, 0 left float" in out
    assert "held-out     5 samples: output SQNR" in out and "top-1 agreement with float" in out
    assert "weights      " in out and "x smaller" in out and f"wrote        {onnx_path}" in out
    assert "quantizing for imx500_tpc on 19 samples" in run.stderr  # stage lines go to stderr
    assert "Reading images" not in run.stderr  # no progress bars outside a terminal
    checked = _cli("check", onnx_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "IMX500: the converter's operator, opset and grid rules hold" in checked.stdout

    saved = tmp_path / "small.pt"
    assert _cli("quantize", "cli_models:small_cnn", "--data", images, "--out", saved, "-q").returncode == 0
    for name, extra in (("qdq.onnx", ["--format", "qdq"]), ("small.torchscript", [])):
        exported = _cli("export", saved, tmp_path / name, "--input-shape", "1,3,16,16", *extra)
        assert exported.returncode == 0, exported.stderr
        compared = _cli("check", tmp_path / name, saved, "--data", images, "--min-sqnr", "20")
        assert compared.returncode == 0, compared.stdout + compared.stderr
        assert "against the simulated model" in compared.stdout and "agrees" in compared.stdout


@needs_torch
def test_quantize_reads_model_files_of_every_kind(tmp_path):
    """A torch.export program with a fixed batch (run in batches of that size, said), a TorchScript file and an ONNX
    file (both converted through onnx2torch, said) and a pickled module: each quantized from the same images."""
    import torch
    from cli_models import small_cnn
    model, x = small_cnn(), torch.randn(4, 3, 16, 16)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "m.pt2")
    torch.export.save(torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},)),
                      tmp_path / "free.pt2")
    torch.jit.save(torch.jit.trace(model, x), tmp_path / "m.torchscript")
    torch.onnx.export(model, (x,), tmp_path / "m.onnx", dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "n"}})
    torch.save(model, tmp_path / "m.pth")
    images = _images(tmp_path / "images", n=30)
    for name, said in (("m.pt2", "batches of exactly 4 samples"), ("free.pt2", None),
                       ("m.torchscript", "through ONNX (onnx2torch)"),
                       ("m.onnx", None), ("m.pth", None)):
        run = _cli("quantize", tmp_path / name, "--data", images, "--out", tmp_path / f"{name}.onnx", "-q")
        assert run.returncode == 0, (name, run.stderr)
        assert "4 layers' weights quantized, 0 left float" in run.stdout, (name, run.stdout)
        sqnr = float(run.stdout.split("output SQNR ")[1].split(" dB")[0])
        assert sqnr > 25, (name, run.stdout)
        assert said is None or said in run.stdout, (name, run.stdout)
        assert said is not None or "note" not in run.stdout, (name, run.stdout)


@needs_torch
def test_quantize_reads_arrays_and_batches_and_measures_mixed_precision(tmp_path):
    """.npz data with --val-data, 'module:callable' batches, a weights-memory target (met, said), and the
    comparison failing loudly (exit 1) when the file is not the model's."""
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz", rng.normal(size=(32, 3, 16, 16)).astype(np.float32))
    np.save(tmp_path / "val.npy", rng.normal(size=(12, 3, 16, 16)).astype(np.float32))
    run = _cli("quantize", "cli_models:small_cnn", "--data", tmp_path / "calib.npz", "--val-data",
               tmp_path / "val.npy", "--weights-memory", "0.6", "--out", tmp_path / "mp.pt", "-q",
               "--report", tmp_path / "why")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""  # --quiet: the summary only
    assert ": met" in run.stdout and "kernels at" in run.stdout and "held-out     12 samples" in run.stdout
    assert f"report       {tmp_path / 'why' / 'report.html'}" in run.stdout
    assert (tmp_path / "why" / "report.html").is_file() and (tmp_path / "why" / "report.json").is_file()
    run = _cli("quantize", "cli_models:other_cnn", "--data", "cli_models:batches", "--holdout", "0",
               "--out", tmp_path / "b.onnx", "--format", "qdq", "-q")
    assert run.returncode == 0, run.stderr
    assert "none (--holdout 0 and no --val-data)" in run.stdout
    mismatch = _cli("check", tmp_path / "b.onnx", tmp_path / "mp.pt", "--data", tmp_path / "val.npy")
    assert mismatch.returncode == 1 and "DISAGREES" in mismatch.stdout


def test_quantize_a_keras_file(tmp_path):
    """A .keras file in, a quantized .keras file out, checked; on the TensorFlow backend also the fully integer
    .tflite file, run by the TFLite interpreter and checked against the simulated model."""
    keras = pytest.importorskip("keras")
    backend = {"KERAS_BACKEND": keras.backend.backend()}
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    keras.Model(inputs, keras.layers.Dense(4)(x)).save(tmp_path / "float.keras")
    images = _images(tmp_path / "images", n=16)
    run = _cli("quantize", tmp_path / "float.keras", "--data", images, "--out", tmp_path / "q.keras", "-q",
               "--tpc", "tflite", env=backend)
    assert run.returncode == 0, run.stderr
    assert "(keras) for tflite_tpc: 2 layers' weights quantized" in run.stdout
    checked = _cli("check", tmp_path / "q.keras", tmp_path / "q.keras", "--data", images, env=backend)
    assert checked.returncode == 0 and "agrees" in checked.stdout, checked.stdout + checked.stderr
    tflite = _cli("export", tmp_path / "q.keras", tmp_path / "q.tflite", env=backend)
    if backend["KERAS_BACKEND"] != "tensorflow":
        assert tflite.returncode == 2 and "TensorFlow backend" in tflite.stderr, tflite.stderr
        return
    assert tflite.returncode == 0, tflite.stderr
    checked = _cli("check", tmp_path / "q.tflite", tmp_path / "q.keras", "--data", images, "--min-sqnr", "25",
                   env=backend)
    assert checked.returncode == 0 and "agrees" in checked.stdout, checked.stdout + checked.stderr


@needs_torch
@pytest.mark.parametrize("case", ["missing model", "unreadable model", "no images", "mixed sizes", "bad tpc",
                                  "unwritable folder", "bad suffix", "onnx model", "bits the chip lacks",
                                  "holdout takes all"])
def test_quantize_bad_input_one_line_exit_2_nothing_written(tmp_path, case, monkeypatch):
    monkeypatch.chdir(TESTS)
    images = _images(tmp_path / "images", n=6)
    out = tmp_path / "out.onnx"
    args = {"missing model": [str(tmp_path / "none.pt2")],
            "unreadable model": [str(tmp_path / "garbage.pt")],
            "no images": ["cli_models:small_cnn", "--data", str(tmp_path / "empty")],
            "mixed sizes": ["cli_models:small_cnn", "--data", str(_images(tmp_path / "mixed", n=4, mixed=True))],
            "bad tpc": ["cli_models:small_cnn", "--tpc", "imx501:1.0"],
            "unwritable folder": ["cli_models:small_cnn", "--out", str(tmp_path / "missing" / "m.onnx")],
            "bad suffix": ["cli_models:small_cnn", "--out", str(tmp_path / "m.tflite")],
            "onnx model": [str(tmp_path / "model.onnx")],
            "bits the chip lacks": ["cli_models:small_cnn", "--tpc", "imx500:1.0", "--activation-bits", "16"],
            "holdout takes all": ["cli_models:small_cnn", "--holdout", "0.99"]}[case]
    (tmp_path / "garbage.pt").write_bytes(b"not a model")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not an image")
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    if "--data" not in args:
        args += ["--data", str(images)]
    if "--out" not in args:
        args += ["--out", str(out)]
    result = CliRunner().invoke(main, ["quantize", *args, "-q"])
    message = {"missing model": "no file at", "unreadable model": "cannot read", "no images": "no images (",
               "mixed sizes": "images differ in size", "bad tpc": "Shipped: imx500:1.0",
               "unwritable folder": "cannot write into", "bad suffix": "exports to .onnx",
               "onnx model": "not a readable ONNX model", "bits the chip lacks": "offers activation bit widths 8, not 16",
               "holdout takes all": "leaves no calibration samples"}[case]
    assert result.exit_code == 2, result.output
    assert message in result.output, result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1
    assert not out.exists() and not (tmp_path / "m.tflite").exists()


def test_every_command_explains_itself():
    for command in (["--help"], ["quantize", "--help"], ["export", "--help"], ["check", "--help"], ["tpc", "--help"],
                    ["tpc", "show", "--help"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0 and "Usage: " in result.output, command
    assert "--weights-memory" in CliRunner().invoke(main, ["quantize", "--help"]).output


@needs_torch
def test_progress_bars_show_on_a_terminal(tmp_path):
    """Under a pseudo-terminal (as a person runs it) the long stages draw progress bars; --quiet draws none."""
    from terminal import on_terminal as run_on_terminal
    images = _images(tmp_path / "images", n=40)

    def on_terminal(*extra):  # (a terminal 110 columns wide)
        return run_on_terminal(["quantize", "cli_models:small_cnn", "--data", images, "--out", tmp_path / "t.pt",
                                "--batch-size", "4", *extra], TESTS, columns=110)

    code, shown = on_terminal()
    assert code == 0, shown
    assert "Reading images" in shown and "%|" in shown and "Statistics collection" in shown, repr(shown[:600])
    code, shown = on_terminal("--quiet")
    assert code == 0 and "%|" not in shown and "wrote" in shown


@needs_torch
@pytest.mark.skipif(not __import__("os").environ.get("HWQUANT_IMXCONV"),
                    reason="opt-in: set HWQUANT_IMXCONV to imxconv-pt (bash benchmarks/setup_imx500.sh installs it)")
def test_check_runs_sonys_converter_when_installed(tmp_path):
    images = _images(tmp_path / "images")
    assert _cli("quantize", "cli_models:small_cnn", "--data", images, "--tpc", "imx500:4.0",
                "--out", tmp_path / "m.onnx", "-q").returncode == 0
    checked = _cli("check", tmp_path / "m.onnx")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Sony's converter" in checked.stdout and "took the file" in checked.stdout
