"""Keras mixed precision side by side with PyTorch's: MobileNetV2 (torchvision's ImageNet weights; in Keras,
keras.applications' network carrying them), weights memory at 75 % of each back end's single-precision
figure, IMX500 1.0, the same 192 calibration crops (batches of 32) and MixedPrecisionQuantizationConfig
(distances on --images samples; AVG, MCT's default, and HESSIAN weighting).

    .venv/bin/python benchmarks/run_keras_hessian_mp.py [--images 4] [--repeats 2] [--threads 2]

Rows per weighting, one after the other in one run: the PyTorch back end (its default: sensitivities
estimated by gradient probes), the PyTorch back end with its sensitivities measured candidate by candidate
as the Keras back end measures them (its probe estimate switched off here), Keras on its torch backend, and
Keras on TensorFlow (`.venv-tf`, scripts/setup_keras_tensorflow.sh, when present; run in that venv by this
script's --worker mode). Time: the whole quantization call and its sensitivity part
(core/mixed_precision's candidate_sensitivity), the fastest of --repeats calls (the machine is shared: the
slower calls are other jobs' noise), on --threads threads (on a shared machine 2 threads wait for each
other at every operation whenever another job holds a core: one thread measures the work); ratios to the
PyTorch rows' times. Fidelity on 490 crops + 20
labelled images, against each framework's float model.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TF_PY = ROOT / ".venv-tf" / "bin" / "python"  # scripts/setup_keras_tensorflow.sh
WEIGHTINGS = (("AVG (default)", False), ("HESSIAN", True))
RATIO = 0.75


@contextlib.contextmanager
def _sensitivity_clock(seconds: list):
    """Appends the time of each candidate_sensitivity call (the measured or estimated sensitivities)."""
    from hwquant.core.mixed_precision import selection

    inner = selection.candidate_sensitivity

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    selection.candidate_sensitivity = timed
    try:
        yield
    finally:
        selection.candidate_sensitivity = inner


def _fastest(call, repeats: int) -> dict:
    """The fastest of `repeats` calls of `call()` -> (model, info): its seconds, its sensitivity seconds,
    the first call's model and info (every call gives the same)."""
    best, first = None, None
    for _ in range(repeats):
        sens: list = []
        with _sensitivity_clock(sens):
            start = time.perf_counter()
            out = call()
            seconds = time.perf_counter() - start
        first = first or out
        print(f"  call: {seconds:.1f} s, sensitivity {sum(sens):.1f} s", file=sys.stderr, flush=True)
        if best is None or seconds < best[0]:
            best = (seconds, sum(sens))
    return {"seconds": best[0], "sensitivity": best[1], "model": first[0], "info": first[1]}


def _bits(info) -> dict:
    return {name: [a, dict(w)] for name, (a, w) in sorted((info.mixed_precision_bit_widths or {}).items())}


def _runs(resource_data, quantize, predict, calib, images: int, repeats: int, around=contextlib.nullcontext) -> list:
    """Both weightings by one framework's facades (`resource_data`, `quantize`) on `calib`, each call inside
    `around()`: per weighting the times, reached / full weights memory, `predict(quantized model)`'s logits and the
    chosen bit widths."""
    import hwquant as mct

    gen = lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32))
    full = resource_data(gen)
    target = mct.core.ResourceUtilization(weights_memory=RATIO * full.weights_memory)
    out = []
    for _, hessian in WEIGHTINGS:
        mp = mct.core.MixedPrecisionQuantizationConfig(use_hessian_based_scores=hessian, num_of_images=images)
        with around():
            run = _fastest(functools.partial(quantize, gen, target_resource_utilization=target,
                                             core_config=mct.core.CoreConfig(mixed_precision_config=mp)), repeats)
        out.append({"seconds": run["seconds"], "sensitivity": run["sensitivity"], "logits": predict(run["model"]),
                    "reached": run["info"].final_resource_utilization.weights_memory / full.weights_memory,
                    "bits": _bits(run["info"])})
    return out


# ---- Keras (either backend: no torch import here, the TensorFlow venv has none) --------------------------
def keras_runs(model, calib, evaluation, images: int, repeats: int) -> list:
    """Both weightings on the Keras `model` (`_runs`), logits on `evaluation`."""
    import numpy as np

    import hwquant as mct

    predict = lambda q: np.concatenate([np.asarray(q.predict_on_batch(evaluation[i:i + 64]))  # noqa: E731
                                        for i in range(0, len(evaluation), 64)])
    return _runs(functools.partial(mct.core.keras_resource_utilization_data, model),
                 functools.partial(mct.ptq.keras_post_training_quantization, model), predict, calib, images, repeats)


def worker(data: str, out: str, images: int, repeats: int, threads: int) -> None:
    """--worker: the Keras runs on this interpreter's backend (TensorFlow in .venv-tf), data and weights
    from `data` (.npz), results to `out` (.npz, the bit widths as JSON)."""
    import keras
    import numpy as np

    from benchmarks.keras_models import keras_mobilenet_v2_architecture, set_weights_by_name

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    arrays = np.load(data)
    model = keras_mobilenet_v2_architecture()
    set_weights_by_name(model, arrays)
    evaluation = arrays["eval"]
    reference = np.concatenate([np.asarray(model.predict_on_batch(evaluation[i:i + 64]))
                                for i in range(0, len(evaluation), 64)])
    runs = keras_runs(model, arrays["calib"], evaluation, images, repeats)
    np.savez(out, reference=reference, backend=keras.backend.backend(), keras_version=keras.__version__,
             **{f"{k}:{key}": (json.dumps(r[key]) if key == "bits" else r[key])
                for k, r in enumerate(runs) for key in r})


def tensorflow_runs(keras_model, calib, evaluation, images: int, repeats: int, threads: int):
    """The Keras runs in .venv-tf: (float logits, runs), or None without that venv."""
    import numpy as np

    from benchmarks.keras_models import weights_by_name

    if not TF_PY.exists():
        print(f"{TF_PY} missing: no TensorFlow rows")
        return None
    with tempfile.TemporaryDirectory() as folder:
        data, out = Path(folder) / "in.npz", Path(folder) / "out.npz"
        np.savez(data, calib=calib, eval=evaluation, **weights_by_name(keras_model))
        subprocess.run([str(TF_PY), __file__, "--worker", str(data), str(out), "--images", str(images),
                        "--repeats", str(repeats), "--threads", str(threads)], check=True,
                       env={**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2",
                            "CUDA_VISIBLE_DEVICES": ""})
        got = dict(np.load(out))
    runs = [{key: (json.loads(str(got[f"{k}:{key}"])) if key == "bits" else got[f"{k}:{key}"])
             for key in ("seconds", "sensitivity", "logits", "reached", "bits")} for k in range(len(WEIGHTINGS))]
    return got["reference"], runs


# ---- PyTorch ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _measured_in_pytorch(on: bool):
    """The PyTorch back end measuring every candidate (its probe estimate switched off) when `on`."""
    from hwquant.torch.mixed_precision import TorchSensitivityBackend

    estimate = TorchSensitivityBackend.estimate
    if on:
        TorchSensitivityBackend.estimate = lambda self, *args, **kwargs: None
    try:
        yield
    finally:
        TorchSensitivityBackend.estimate = estimate


def torch_runs(model, calib, evaluation, images: int, repeats: int, measured: bool) -> list:
    """Both weightings on the PyTorch `model` (`_runs`; `measured`: its probe estimate off), logits on `evaluation`."""
    import torch

    import hwquant as mct

    def predict(q):
        with torch.no_grad():
            return torch.cat([q(evaluation[i:i + 64]) for i in range(0, len(evaluation), 64)]).numpy()
    return _runs(functools.partial(mct.core.pytorch_resource_utilization_data, model),
                 functools.partial(mct.ptq.pytorch_post_training_quantization, model), predict, calib, images, repeats,
                 functools.partial(_measured_in_pytorch, measured))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=4, help="MixedPrecisionQuantizationConfig.num_of_images")
    ap.add_argument("--repeats", type=int, default=1, help="calls per row, the fastest reported")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of torch and TensorFlow")
    ap.add_argument("--no-tensorflow", action="store_true", help="no Keras-on-TensorFlow rows")
    ap.add_argument("--worker", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.worker:
        worker(*args.worker, args.images, args.repeats, args.threads)
        return
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras
    import numpy as np
    import torch

    from benchmarks.keras_models import keras_mobilenet_v2_from_torch
    from benchmarks.run_keras import _figures, _nhwc, _predict_keras, _predict_torch
    from benchmarks.run_ptq import load_data, load_model

    torch.set_num_threads(args.threads)
    data = load_data("mobilenet_v2", 192, 490, seed=0)
    torch_model = load_model("mobilenet_v2").eval()
    keras_model = keras_mobilenet_v2_from_torch(torch_model.state_dict())
    evals = torch.cat([data["eval"], data["extra"]["labelled"]])
    calib_k, evals_k = _nhwc(data["calib"]), _nhwc(evals)
    labels, n_lab = data["extra_y"]["labelled"].numpy(), len(data["extra_y"]["labelled"])
    tools = [("PyTorch", _predict_torch(torch_model, evals),
              torch_runs(torch_model, data["calib"], evals, args.images, args.repeats, measured=False)),
             ("PyTorch, measured as Keras measures", _predict_torch(torch_model, evals),
              torch_runs(torch_model, data["calib"], evals, args.images, args.repeats, measured=True)),
             (f"Keras {keras.__version__}, torch backend", _predict_keras(keras_model, evals_k),
              keras_runs(keras_model, calib_k, evals_k, args.images, args.repeats))]
    tf = None if args.no_tensorflow else tensorflow_runs(keras_model, calib_k, evals_k, args.images, args.repeats,
                                                         args.threads)
    if tf is not None:
        tools.append(("Keras, tensorflow backend", *tf))
    print(f"\nMobileNetV2, weights memory at {RATIO:.0%}, IMX500 1.0, distances on {args.images} images, "
          f"fastest of {args.repeats} call(s), {args.threads} thread(s)")
    print("| weighting | back end | call (s) | sensitivity (s) | call / sensitivity vs PyTorch | vs PyTorch measured "
          "| reached / full | top-1 agreement | SQNR (dB) | labelled |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w, (weighting, _) in enumerate(WEIGHTINGS):
        pytorch, measured = tools[0][2][w], tools[1][2][w]
        for name, reference, runs in tools:
            r = runs[w]
            fig = _figures(reference[:-n_lab], r["logits"][:-n_lab], None)
            right = int((np.asarray(r["logits"])[-n_lab:].argmax(1) == labels).sum())
            vs = lambda base, r=r: f"{r['seconds'] / base['seconds']:.2f}x / {r['sensitivity'] / base['sensitivity']:.2f}x"
            print(f"| {weighting} | {name} | {r['seconds']:.1f} | {r['sensitivity']:.1f} | {vs(pytorch)} | {vs(measured)} "
                  f"| {float(r['reached']):.3f} | {fig['agreement']:.1f}% | {fig['sqnr']:.1f} | {right}/{n_lab} |")
        if tf is not None:
            same = tools[2][2][w]["bits"] == tf[1][w]["bits"]
            print(f"({weighting}: Keras on torch and on TensorFlow choose {'the same' if same else 'different'} bit widths)")


if __name__ == "__main__":
    main()
