"""Any Ultralytics YOLO model (detect, segment, pose, classify; n, s, m ...) to Sony's IMX500, fitted into its memory.

    python examples/yolo_imx500.py yolo11s.pt my_images/ --imgsz 320 --trust-model-file
    python examples/yolo_imx500.py yolov8s.yaml my_images/ --imgsz 320 --no-convert   # architecture only, ONNX only

Ultralytics' own `export(format="imx")` takes the nano models only. `hwquant.yolo.export_imx500` runs the same
exporter with hwquant's quantization for any scale: it quantizes at 8 bits, runs Sony's converter (imxconv-pt, from
`pip install "imx500-converter[pt]"`, found beside this Python or on PATH) and, when the converter's memory report
says the network does not fit the chip's 8 MB, quantizes again with mixed precision under the weights budget the
report leaves. Needs `ultralytics` and Sony's `edge-mdt-cl` (the NMS layer); no network access.
"""
from __future__ import annotations

import argparse
import logging

import hwquant


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an Ultralytics checkpoint (.pt) or model yaml")
    p.add_argument("data", help="a folder of calibration images, or a dataset yaml")
    p.add_argument("--imgsz", type=int, nargs="+", default=[640], help="input size: one number or height width")
    p.add_argument("--output-dir", help="where to write (default: <model>_imx_model beside the model)")
    p.add_argument("--weights-memory", type=float, help="a weights budget in MB instead of fitting the chip")
    p.add_argument("--gptq", action="store_true", help="gradient-based PTQ instead of plain PTQ")
    p.add_argument("--no-convert", action="store_true", help="write the ONNX file only")
    p.add_argument("--trust-model-file", action="store_true",
                   help="read a .pt checkpoint as Ultralytics does (a pickle: it can run code; only files you trust)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = hwquant.yolo.export_imx500(
        args.model, args.data, args.imgsz if len(args.imgsz) > 1 else args.imgsz[0], output_dir=args.output_dir,
        weights_memory=args.weights_memory * 2 ** 20 if args.weights_memory else None, gptq=args.gptq,
        convert=not args.no_convert, trust_model_file=args.trust_model_file)
    print(f"{result.task} model, input {result.imgsz}: {result.output_dir}")
    for attempt in result.attempts:
        print("  attempt", attempt["attempt"], {k: v for k, v in attempt.items() if k != "attempt"})
    if result.fits is None:
        print("not converted: whether it fits the chip is for the converter to say")
    else:
        print("fits the chip" if result.fits else "does NOT fit the chip (see the log for what to change)")


if __name__ == "__main__":
    main()
