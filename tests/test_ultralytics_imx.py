"""Ultralytics' own IMX500 export, `YOLO(...).export(format="imx")`, unchanged, on hwquant, and Sony's converter on
the file it writes: YOLOv8n and YOLO11n, each of Ultralytics' four IMX tasks (detect, segment, pose, classify),
built from Ultralytics' yaml (batch-norm statistics re-estimated on real photographs), calibrated on a local folder
of real photographs (benchmarks/ultralytics_imx.py does the run).

Opt-in, like the converter test: set HWQUANT_ULTRALYTICS=1 after `bash scripts/setup_ultralytics_imx.sh` (it needs
Java, the converter and about four minutes a network)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONVERTER_BIN = ROOT / ".venv-imx" / "bin"
YOLO_PYTHON = ROOT / ".venv-yolo" / "bin" / "python"  # hwquant beside Ultralytics (scripts/setup_ultralytics_imx.sh)
OPT_IN = pytest.mark.skipif(not os.environ.get("HWQUANT_ULTRALYTICS"),
                            reason="opt-in: set HWQUANT_ULTRALYTICS=1 after bash scripts/setup_ultralytics_imx.sh")


@OPT_IN
@pytest.mark.parametrize("task", ["detect", "segment", "pose", "classify"])
@pytest.mark.parametrize("model", ["yolov8n", "yolo11n"])
def test_ultralytics_exports_yolo_to_the_imx500_with_hwquant_and_the_converter_accepts_it(model, task, tmp_path):
    assert (CONVERTER_BIN / "imxconv-pt").exists() and YOLO_PYTHON.exists(), "run bash scripts/setup_ultralytics_imx.sh"
    out = tmp_path / "result.json"
    env = {**os.environ, "PATH": f"{CONVERTER_BIN}:{os.environ['PATH']}"}
    env.pop("YOLO_AUTOINSTALL", None)
    run = subprocess.run([str(YOLO_PYTHON), str(ROOT / "benchmarks/ultralytics_imx.py"), "--toolkit", "hwquant",
                          "--model", model, "--task", task, "--work", str(tmp_path / "work"), "--out", str(out)],
                         env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0 and out.exists(), run.stdout[-4000:] + run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["toolkit_version"] != "2.6.1" and result["error"] is None, result["error"]
    assert result["converter"] == "accepted", run.stdout[-4000:]
    report = result["memory_report"]["Memory Report"]
    assert report["Fit In Chip"] is True
    # geometric outputs follow the float model's (the spread heads' scores amplify every error: compared with MCT in
    # the benchmark, not here); PyTorch and the ONNX file agree
    for key in {"detect": ["boxes"], "segment": ["boxes", "mask_coefficients", "mask_prototypes"],
                "pose": ["boxes", "keypoints"], "classify": ["probabilities"]}[task]:
        assert result[f"sqnr_{key}_db"] > 15 and abs(result[f"sqnr_{key}_db"] - result[f"onnx_sqnr_{key}_db"]) < 3, key
    if task == "classify":
        assert result["top1_agreement"] >= 0.8


def _checks(mode: str, tmp_path, timeout: int) -> dict:
    assert YOLO_PYTHON.exists(), "run bash scripts/setup_ultralytics_imx.sh"
    env = {**os.environ, "PATH": f"{CONVERTER_BIN}:{os.environ['PATH']}"}
    run = subprocess.run([str(YOLO_PYTHON), str(ROOT / "tests/yolo_imx500_checks.py"), mode, str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-4000:] + run.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])



@OPT_IN
def test_export_imx500_finds_the_head_nodes_ultralytics_names_by_hand(tmp_path):
    # the 16-bit nodes come from the graph (downstream of the head's anchor constants), for any scale; on the nano
    # networks they are exactly the ones Ultralytics' IMX settings list
    for network, (found, ultralytics, written, fits) in _checks("names", tmp_path, 1500).items():
        assert found == ultralytics, network
        assert written and fits is None, network  # convert=False: the file, no verdict


@OPT_IN
def test_export_imx500_refuses_bad_input_clearly(tmp_path):
    out = _checks("errors", tmp_path, 900)
    assert out["pickle"][0] == "UnsafeModelFileError" and "trust_model_file=True" in out["pickle"][1]
    assert out["imgsz"][0] == "InvalidConfigError" and "multiple of 32" in out["imgsz"][1]
    assert out["no images"][0] == "InvalidConfigError" and "no images" in out["no images"][1]
    assert out["missing yaml"][0] == "InvalidConfigError" and "not found" in out["missing yaml"][1]
    assert out["model type"][0] == "InvalidConfigError"
    # a plain Ultralytics export afterwards runs Ultralytics' own step (which imports MCT, absent here)
    assert out["plain export"][0] == "ModuleNotFoundError" and "model_compression_toolkit" in out["plain export"][1]


@OPT_IN
def test_export_imx500_fits_a_scale_ultralytics_refuses(tmp_path):
    out = _checks("fit", tmp_path, 2400)
    first, last = out["attempts"][0], out["attempts"][-1]
    assert first["weights_budget"] is None and first["fits"] is False  # 8-bit YOLOv8s does not fit the 8 MB
    assert out["fits"] is True and last["fits"] is True and len(out["attempts"]) <= 3
    assert last["model_memory"] + last["runtime_memory"] <= 8 * 2 ** 20
    assert out["packer"].endswith("packerOut.zip")
