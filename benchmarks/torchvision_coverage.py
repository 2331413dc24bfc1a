"""Every torchvision classification architecture through PTQ (IMX500 default TPC).

torchvision's weights cannot be downloaded here, so the models keep their random initialisation
(batch-norm statistics are set by a few forward passes in training mode so that the activations
are realistic); each model is calibrated on 2 batches of 2 random images and compared with float
on 4 others: output SQNR, and the number of weighted layers and activation quantizers.

    .venv/bin/python benchmarks/torchvision_coverage.py [--only resnet18,vit_b_16] [--write]
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hwquant as mct  # noqa: E402
from benchmarks.report import replace_section  # noqa: E402
from benchmarks.torchvision_support import import_torchvision  # noqa: E402
from hwquant.torch.quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper  # noqa: E402


def run_one(tv, name: str) -> dict:
    torch.manual_seed(0)
    model = tv.models.get_model(name)
    for m in model.modules():  # ViT heads start at zero: the float output would be all zeros
        if isinstance(m, torch.nn.Linear) and not m.weight.any():
            torch.nn.init.normal_(m.weight, std=0.02)
    size = 299 if name == "inception_v3" else 224
    with torch.no_grad():  # realistic batch-norm statistics for a randomly initialised model
        model.train()
        for _ in range(2):
            model(torch.randn(2, 3, size, size))
        model.eval()
    calib = [torch.randn(2, 3, size, size) for _ in range(2)]
    test = torch.randn(4, 3, size, size)
    start = time.perf_counter()
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[c] for c in calib]))
    seconds = time.perf_counter() - start
    with torch.no_grad():
        f, o = model(test), q(test)
    sqnr = 10 * torch.log10((f ** 2).sum() / ((f - o) ** 2).sum()).item()
    return dict(seconds=seconds, sqnr=sqnr,
                wrappers=sum(isinstance(m, PytorchQuantizationWrapper) for m in q.modules()),
                holders=sum(isinstance(m, PytorchActivationQuantizationHolder) for m in q.modules()),
                params=sum(p.numel() for p in model.parameters()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    args = parser.parse_args()
    tv = import_torchvision()
    torch.set_num_threads(2)
    names = args.only.split(",") if args.only else tv.models.list_models(module=tv.models)
    rows, failures = [], []
    for name in names:
        try:
            r = run_one(tv, name)
            rows.append(f"| {name} | {r['params'] / 1e6:.1f} | {r['wrappers']} | {r['holders']} "
                        f"| {r['sqnr']:.1f} | {r['seconds']:.1f} |")
            print(rows[-1], flush=True)
        except Exception as e:  # noqa: BLE001 - a failure is a result to report
            failures.append(f"| {name} | {type(e).__name__}: {str(e).splitlines()[0][:120]} |")
            print(failures[-1], flush=True)
        gc.collect()
    text = (f"{len(rows)} of {len(names)} architectures quantized (torch {torch.__version__}, 2 CPU threads, "
            "random weights, 4 calibration / 4 test images).\n\n"
            "| model | params (M) | weight-quantized layers | activation quantizers | output SQNR (dB) | PTQ time (s) |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    if failures:
        text += "\nFailures:\n\n| model | error |\n|---|---|\n" + "\n".join(failures) + "\n"
    print(text)
    if args.write:
        replace_section("torchvision classification coverage", text)


if __name__ == "__main__":
    main()
