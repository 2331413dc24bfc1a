"""The command line against MCT's one-call wrapper, and the README's main job before / after (issue 33).

Each job runs as its own process; the figures are the whole process's wall time (from launch to exit, imports
included) and peak resident memory (GNU time's maximum resident set of that process), side by side:

- main job before: examples/quantize_mobilenet_v2.py (the earlier README main job: IMX500 1.0, 192 calibration /
  490 evaluation crops, evaluated in 256-image batches);
- main job after: the README's `hwquant quantize` (IMX500 4.0, 192 calibration / 256 held-out images, read from
  the shipped folders, MCTQ ONNX written);
- the same job with MCT 2.6.1's MCTWrapper (benchmarks/mct_wrapper_job.py, .venv-mct), same images and
  preprocessing, IMX500 converter 3.16 (TPC 4.0), MCTQ ONNX written, the held-out images measured.

    bash benchmarks/setup_peers.sh && .venv/bin/python benchmarks/run_cli.py
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / ".cache" / "assets" / "images"
RESULTS = ROOT / "benchmarks" / "results" / "cli.json"


def run(command, env=None) -> dict:
    """Wall time, peak memory (GNU time's maximum resident set of the child alone) and output of one process."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as peak_file:
        started = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", peak_file.name, *command], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, **(env or {})})
        wall = time.perf_counter() - started
        peak_kb = int(peak_file.read().strip().splitlines()[-1])
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return {"wall_s": wall, "peak_gb": peak_kb * 1024 / 1e9, "stdout": done.stdout}


def main() -> None:
    if not (IMAGES / "evaluation").is_dir():
        raise SystemExit("run bash scripts/fetch_assets.sh first")
    mct_python = ROOT / ".venv-mct" / "bin" / "python"
    with tempfile.TemporaryDirectory() as tmp:
        jobs = {}
        jobs["before"] = run([sys.executable, "examples/quantize_mobilenet_v2.py"])
        jobs["after"] = run([str(ROOT / ".venv" / "bin" / "hwquant"), "quantize",
                             "benchmarks.models:mobilenet_v2_pretrained", "--data", str(IMAGES / "calibration"),
                             "--val-data", str(IMAGES / "evaluation"), "--preset", "imagenet", "--tpc", "imx500:4.0",
                             "--out", f"{tmp}/hwquant.onnx"])
        jobs["mct_wrapper"] = run([str(mct_python), "benchmarks/mct_wrapper_job.py", str(IMAGES / "calibration"),
                                   str(IMAGES / "evaluation"), f"{tmp}/mct.onnx"])
    before_q = float(re.search(r"quantization time\s+([\d.]+) s", jobs["before"]["stdout"]).group(1))
    after = jobs["after"]["stdout"]
    after_q = float(re.search(r"quantization\s+([\d.]+) s", after).group(1))
    after_sqnr = float(re.search(r"output SQNR ([\d.]+) dB", after).group(1))
    after_agree = float(re.search(r"agreement with float ([\d.]+) %", after).group(1))
    mct = json.loads(jobs["mct_wrapper"]["stdout"].strip().splitlines()[-1])
    result = {
        "main_job_before": {"wall_s": jobs["before"]["wall_s"], "quantization_s": before_q,
                            "peak_gb": jobs["before"]["peak_gb"]},
        "main_job_after": {"wall_s": jobs["after"]["wall_s"], "quantization_s": after_q,
                           "peak_gb": jobs["after"]["peak_gb"], "sqnr_db": after_sqnr, "agreement": after_agree / 100,
                           "wall_over_quantization": jobs["after"]["wall_s"] / after_q},
        "mct_wrapper": {"wall_s": jobs["mct_wrapper"]["wall_s"], "peak_gb": jobs["mct_wrapper"]["peak_gb"],
                        "quantize_and_export_s": mct["quantize_and_export_s"], "sqnr_db": mct["sqnr_db"],
                        "agreement": mct["agreement"]},
    }
    result["hwquant_over_mct"] = {"wall": result["main_job_after"]["wall_s"] / result["mct_wrapper"]["wall_s"],
                                  "peak_memory": result["main_job_after"]["peak_gb"] / result["mct_wrapper"]["peak_gb"]}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
