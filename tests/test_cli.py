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
