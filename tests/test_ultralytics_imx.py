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


@pytest.mark.skipif(not os.environ.get("HWQUANT_ULTRALYTICS"),
                    reason="opt-in: set HWQUANT_ULTRALYTICS=1 after bash scripts/setup_ultralytics_imx.sh")
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
