"""Keras mixed precision with and without Hessian-weighted distances (issue 28 made the Keras path share
the measurement loop, which brought Hessian weighting to Keras): MobileNetV2 (torchvision's ImageNet
weights in keras.applications' network), weights memory at 75 % of its single-precision figure, IMX500 1.0.

    KERAS_BACKEND=torch .venv/bin/python benchmarks/run_keras_hessian_mp.py [--images 32]

The distances are measured on --images samples (MCT's default 32; on Keras' torch backend a MobileNetV2 run
takes about 100 s per 4 images on 2 cores, so the figures in docs/BENCHMARKS.md use 4).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras  # noqa: E402
import torch  # noqa: E402

import hwquant as mct  # noqa: E402
from benchmarks.keras_models import keras_mobilenet_v2_from_torch  # noqa: E402
from benchmarks.run_keras import _figures, _nhwc, _predict_keras  # noqa: E402
from benchmarks.run_ptq import load_data, load_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=32, help="MixedPrecisionQuantizationConfig.num_of_images")
    args = ap.parse_args()
    torch.set_num_threads(2)
    data = load_data("mobilenet_v2", 192, 490, seed=0)
    model = keras_mobilenet_v2_from_torch(load_model("mobilenet_v2").state_dict())
    calib, evals = _nhwc(data["calib"]), _nhwc(torch.cat([data["eval"], data["extra"]["labelled"]]))
    labels, n_lab = data["extra_y"]["labelled"].numpy(), len(data["extra_y"]["labelled"])
    gen = lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32))  # noqa: E731
    full = mct.core.keras_resource_utilization_data(model, gen)
    target = mct.core.ResourceUtilization(weights_memory=0.75 * full.weights_memory)
    reference = _predict_keras(model, evals)
    print(f"Keras {keras.__version__} ({keras.backend.backend()} backend), weights memory target 75 %, "
          f"distances on {args.images} images")
    print("| distance weighting | time (s) | reached / full | top-1 agreement | SQNR (dB) | labelled |")
    print("|---|---:|---:|---:|---:|---:|")
    for hessian in (False, True):
        mp = mct.core.MixedPrecisionQuantizationConfig(use_hessian_based_scores=hessian, num_of_images=args.images)
        start = time.perf_counter()
        q, info = mct.ptq.keras_post_training_quantization(
            model, gen, target_resource_utilization=target, core_config=mct.core.CoreConfig(mixed_precision_config=mp))
        seconds = time.perf_counter() - start
        out = _predict_keras(q, evals)
        fig = _figures(reference[:-n_lab], out[:-n_lab], None)
        right = int((out[-n_lab:].argmax(1) == labels).sum())
        reached = info.final_resource_utilization.weights_memory / full.weights_memory
        print(f"| {'HESSIAN' if hessian else 'AVG (default)'} | {seconds:.1f} | {reached:.3f} | {fig['agreement']:.1f}% "
              f"| {fig['sqnr']:.1f} | {right}/{n_lab} |", flush=True)


if __name__ == "__main__":
    main()
