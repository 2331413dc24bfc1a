"""The command-line benchmark's MCT side, run in .venv-mct: the job `hwquant quantize` does, written with MCT
2.6.1's MCTWrapper (MCT has no command line): read the same image folders with the same preprocessing
(short side 256, centre crop 224, ImageNet mean / std), quantize MobileNetV2 for the IMX500 (converter 3.16:
TPC 4.0), export MCTQ ONNX, measure the held-out images. Prints one JSON line.

    .venv-mct/bin/python benchmarks/mct_wrapper_job.py CALIBRATION_DIR EVALUATION_DIR OUT.onnx
"""
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
STARTED = time.perf_counter()
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def images(folder: str) -> np.ndarray:
    from PIL import Image
    out = []
    for path in sorted(Path(folder).glob("*.jpg")):
        img = Image.open(path).convert("RGB")
        w, h = img.size
        f = 256 / min(w, h)
        img = img.resize((round(w * f), round(h * f)), Image.BILINEAR)
        w, h = img.size
        left, top = (w - 224) // 2, (h - 224) // 2
        a = np.asarray(img.crop((left, top, left + 224, top + 224)), np.float32) / 255
        out.append(((a - MEAN) / STD).transpose(2, 0, 1))
    return np.stack(out)


def peak_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def main() -> None:
    import torch

    from benchmarks.models import mobilenet_v2_pretrained
    from benchmarks.peer_mct import import_mct
    import_mct()  # (the torchvision operator schemas MCT's import needs on the CPU wheel)
    # MCT 2.6.1 calls torch.onnx.export as written for torch < 2.9 (the TorchScript exporter); torch 2.13's default
    # (dynamo) refuses its dynamic_axes: restore the old default, as benchmarks/peer_mct.py does
    import functools
    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)
    from model_compression_toolkit.wrapper.mct_wrapper import MCTWrapper
    calibration_dir, evaluation_dir, out = sys.argv[1:4]
    model = mobilenet_v2_pretrained()
    calibration, evaluation = torch.from_numpy(images(calibration_dir)), torch.from_numpy(images(evaluation_dir))

    def representative_dataset():
        for i in range(0, len(calibration), 32):
            yield [calibration[i:i + 32]]

    started = time.perf_counter()
    ok, quantized = MCTWrapper().quantize_and_export(
        float_model=model, representative_dataset=representative_dataset, framework="pytorch", method="PTQ",
        use_mixed_precision=False, param_items=[["sdsp_version", "3.16"], ["save_model_path", out]])
    quantize_and_export = time.perf_counter() - started
    with torch.no_grad():
        f = torch.cat([model(evaluation[i:i + 32]) for i in range(0, len(evaluation), 32)]).double()
        q = torch.cat([quantized(evaluation[i:i + 32]) for i in range(0, len(evaluation), 32)]).double()
    sqnr = 10 * torch.log10((f ** 2).sum() / ((f - q) ** 2).sum()).item()
    agreement = (f.argmax(1) == q.argmax(1)).double().mean().item()
    print(json.dumps({"ok": bool(ok), "quantize_and_export_s": quantize_and_export, "sqnr_db": sqnr,
                      "agreement": agreement, "process_s_inside": time.perf_counter() - STARTED,
                      "peak_bytes": peak_bytes()}))


if __name__ == "__main__":
    main()
