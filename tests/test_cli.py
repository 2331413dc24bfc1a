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
