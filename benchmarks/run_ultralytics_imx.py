"""Ultralytics YOLO to the IMX500: Ultralytics' own exporter, unchanged, with hwquant and with MCT 2.6.1, one run.

    bash scripts/setup_ultralytics_imx.sh && bash benchmarks/setup_peers.sh   # .venv-yolo, .venv-imx, .venv-mct
    .venv-mct/bin/pip install --no-deps ultralytics==8.4.190 edge-mdt-tpc==1.3.0 edge-mdt-cl==1.1.1 torchvision==0.28.0
    .venv/bin/python benchmarks/run_ultralytics_imx.py          # runs the four exports, writes its section

For each model (YOLOv8n, YOLO11n from Ultralytics' yaml) and toolkit, benchmarks/ultralytics_imx.py runs
`YOLO(...).export(format="imx")` in a process of its own, one after the other (the machine otherwise idle),
and reports the PTQ call's time and peak memory, the whole export's time and peak memory, the converter's
verdict and memory report, and output SQNR against float. `--results DIR` formats the JSON files of an
earlier run (DIR/<model>-<toolkit>.json) instead of running.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402

SECTION = "Ultralytics YOLO to IMX500"
PYTHON = {"hwquant": ROOT / ".venv-yolo/bin/python", "mct": ROOT / ".venv-mct/bin/python"}
MODELS = ("yolov8n", "yolo11n")


def run(model: str, toolkit: str, out_dir: Path) -> dict:
    out = out_dir / f"{model}-{toolkit}.json"
    env = {**os.environ, "PATH": f"{ROOT / '.venv-imx/bin'}:{os.environ['PATH']}"}
    with open(out_dir / f"{model}-{toolkit}.log", "w") as log:
        subprocess.run([str(PYTHON[toolkit]), str(ROOT / "benchmarks/ultralytics_imx.py"), "--toolkit", toolkit,
                        "--model", model, "--work", str(out_dir / f"{model}-{toolkit}"), "--out", str(out)],
                       env=env, stdout=log, stderr=subprocess.STDOUT, timeout=3600, check=False)
    return json.loads(out.read_text()) if out.exists() else {"error": "no result (see the log)"}


def _db(r: dict, key: str) -> str:
    v = r.get(key)
    return "-" if v is None else f"{v:.1f}"


def _memory(r: dict) -> str:
    m = r.get("memory_report", {}).get("Memory Report")
    if not m:
        return "-"
    return (f"{m['Memory Usage']} ({m['Memory Utilization']}): model {m['Model Memory Physical Size']}, runtime "
            f"{m['Runtime Memory Physical Size']}, fits: {'yes' if m['Fit In Chip'] else 'no'}")


def table(results: dict) -> str:
    rows = []
    for model in MODELS:
        pair = {tk: results.get((model, tk), {}) for tk in ("hwquant", "mct")}
        for tk, r in pair.items():
            ratio = ""
            if tk == "hwquant" and pair["mct"].get("ptq_s") and r.get("ptq_s"):
                ratio = f" ({r['ptq_s'] / pair['mct']['ptq_s']:.2f}x)"
            verdict = r.get("converter", "-") if not r.get("error") else f"refused: {str(r['error'])[:80]}"
            rows.append(
                f"| {model} | {'hwquant ' + r.get('toolkit_version', '') if tk == 'hwquant' else 'MCT 2.6.1'} | "
                f"{r.get('ptq_s', float('nan')):.0f} s{ratio} | {r.get('ptq_peak_rss_mb', float('nan')):.0f} MB | "
                f"{r.get('export_s', float('nan')):.0f} s | {r.get('process_peak_rss_mb', float('nan')):.0f} MB | "
                f"{_db(r, 'sqnr_boxes_db')} / {_db(r, 'onnx_sqnr_boxes_db')} | "
                f"{_db(r, 'sqnr_scores_db')} / {_db(r, 'onnx_sqnr_scores_db')} | "
                f"{_db(r, 'sqnr_kept_scores_db')} / {_db(r, 'onnx_sqnr_kept_scores_db')} | {verdict} | {_memory(r)} |")
    return ("| model | toolkit | PTQ call | PTQ peak memory | whole export | export peak memory | boxes SQNR dB "
            "(torch / ONNX) | scores SQNR dB | scores >= 0.05 SQNR dB | converter | converter memory report |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, help="format the JSON files of an earlier run in this folder")
    ap.add_argument("--out-dir", type=Path, default=ROOT / ".cache/benchmarks/ultralytics_imx")
    ap.add_argument("--note", default="", help="a paragraph appended to the section (how the results were run)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    results = {}
    if args.results:
        for model in MODELS:
            for tk in ("hwquant", "mct"):
                path = args.results / f"{model}-{tk}.json"
                results[(model, tk)] = json.loads(path.read_text()) if path.exists() else {"error": "not run"}
    else:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for model in MODELS:
            for tk in ("mct", "hwquant"):
                results[(model, tk)] = run(model, tk, args.out_dir)
    text = (f"`benchmarks/run_ultralytics_imx.py` ({platform.machine()}, {os.cpu_count()} cores, CPU): Ultralytics "
            "8.4.190's `YOLO(...).export(format=\"imx\")` unchanged (edge-mdt-tpc 1.3.0's IMX500 4.0 TPC, 16-bit "
            "activations on its four named nodes, mixed precision under its weights-memory target, edge-mdt-cl's "
            "NMS layer, the MCTQ export, Sony's imxconv-pt 3.19.2), run once with hwquant (through "
            "`hwquant.mct_alias`) and once with MCT 2.6.1, each in a process of its own, one after the other. "
            "Models from Ultralytics' yaml with seeded weights, batch-norm statistics re-estimated on the "
            "calibration photographs, the last classification convolutions scaled so that the scores spread as a "
            "trained detector's (most near zero, 5 % of them >= 0.05; this scaling also amplifies every upstream "
            "quantization error about 8 times, hence the low score SQNR of both toolkits: compare them side by "
            "side, not with a trained network's). Calibration: 32 real photographs as a local dataset (Ultralytics' "
            "loader: letterbox 640, batch 1); SQNR against the float model on 17 other photographs, in PyTorch and "
            "through the toolkit's own MCTQ ONNX file of the quantized model (without the NMS layer) in ONNX "
            "Runtime. PTQ call: the facade Ultralytics calls, timed, with the process's peak resident memory "
            "while it runs; whole export: `export()` including the converter (its peak memory is the process's, "
            "the converter's Java process apart). The last score column is over the float scores >= 0.05, the "
            "candidates a detector's threshold reads.\n\n" + table(results)
            + (f"\n\n{args.note}" if args.note else ""))
    report.publish(SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
