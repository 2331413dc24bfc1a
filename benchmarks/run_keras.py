"""Keras 3 benchmark (issue 17, first part): hwquant's Keras PTQ on the Keras versions of MobileNetV2
(torchvision's real weights, benchmarks/keras_models.py) and the Fashion-MNIST CNNs, against hwquant's
PyTorch PTQ of the same weights, on the same calibration and evaluation data.

    KERAS_BACKEND=torch .venv/bin/python benchmarks/run_keras.py      # writes its section of docs/BENCHMARKS.md

MCT 2.6.1's Keras PTQ (TensorFlow 2.15 venv), the TensorFlow backend and TFLite latency come next.
"""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import hwquant as mct  # noqa: E402
from benchmarks import report  # noqa: E402
from benchmarks.keras_models import REPEATS, keras_fashion_model, keras_mobilenet_v2_from_torch, timed_calls, weights_by_name  # noqa: E402
from benchmarks.run_ptq import load_data, load_model, seed_everything  # noqa: E402

TITLE = "Keras (hwquant's Keras 3 back end)"


def _nhwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(0, 2, 3, 1).contiguous().numpy()


def _figures(float_logits: np.ndarray, q_logits: np.ndarray, labels) -> dict:
    out = {"agreement": 100 * float((float_logits.argmax(1) == q_logits.argmax(1)).mean()),
           "sqnr": 10 * float(np.log10((float_logits ** 2).sum() / ((float_logits - q_logits) ** 2).sum()))}
    if labels is not None:
        out["labelled"] = int((q_logits.argmax(1) == labels).sum())
    return out


def _predict_keras(model, x, batch=64):
    return np.concatenate([np.asarray(model.predict_on_batch(x[i:i + batch])) for i in range(0, len(x), batch)])


def _predict_torch(model, x, batch=64):
    with torch.no_grad():
        return torch.cat([model(x[i:i + batch]) for i in range(0, len(x), batch)]).numpy()


ROOT = Path(__file__).resolve().parents[1]
MCT_KERAS_PY = ROOT / ".venv-mct-keras" / "bin" / "python"   # benchmarks/setup_peers.sh
TF_PY = ROOT / ".venv-tf" / "bin" / "python"                   # scripts/setup_keras_tensorflow.sh


def _run_script(python: Path, script: str, *args: str) -> None:
    subprocess.run([str(python), str(Path(__file__).with_name(script)), *args], check=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})


def run_in_venv(python: Path, script: str, keras_model, calib: np.ndarray, evaluation: np.ndarray, tflite_dir: str):
    """A MobileNetV2 quantization run in another venv (TensorFlow): (seconds, float, quantized logits) of
    PTQ and (seconds, quantized logits) of mixed precision at 75 % of the weights memory; its TFLite files
    go to `tflite_dir`."""
    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "in.npz", calib=calib, eval=evaluation, **weights_by_name(keras_model))
        _run_script(python, script, "--data", str(Path(folder) / "in.npz"), "--out", str(Path(folder) / "out.npz"),
                    "--tflite-dir", tflite_dir, "--mp-out", str(Path(folder) / "mp.npz"))
        out, mp = np.load(Path(folder) / "out.npz"), np.load(Path(folder) / "mp.npz")
        return ((float(out["seconds"]), float(out["first"])), out["float_logits"], out["quantized_logits"]), \
            ((float(mp["seconds"]),), mp["quantized_logits"])


TFLITE_FILES = {"float.tflite": "float (Keras model, TFLite converter)",
                "hwquant_int8.tflite": "hwquant INT8 (IMX500 1.0 TPC, the PTQ above)",
                "hwquant_int8_tflite_tpc.tflite": "hwquant INT8 (TFLite 1.0 TPC)",
                "mct_int8.tflite": "MCT 2.6.1 INT8 (IMX500 1.0 TPC, the PTQ above)"}


TFLITE_NOTES = ("TFLite's integer ADD rounds ties upward where the simulation rounds them to even; with the IMX500 "
                "TPC's power-of-two scales half of a residual sum's values can be ties, so hwquant's INT8 file breaks "
                "them toward zero instead (keras/tflite_int8.py). The TFLite TPC (uniform scales, ReLU6 fused into "
                "its kernel as TFLite computes it) is the one made for this runtime.")


def tflite_rows(tflite_dir: str, evaluation: np.ndarray, float_logits: np.ndarray, labels: np.ndarray) -> list:
    """The TFLite files run by ai-edge-litert in .venv-tf: size, latency at batch 1, fidelity to the float
    Keras model; hwquant's files with their worst layer's distance from the simulation."""
    files = [name for name in TFLITE_FILES if (Path(tflite_dir) / name).exists()]
    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "eval.npz", eval=evaluation)
        _run_script(TF_PY, "tflite_files.py", "--data", str(Path(folder) / "eval.npz"), "--out", str(Path(folder) / "out.npz"),
                    *[str(Path(tflite_dir) / name) for name in files])
        out = dict(np.load(Path(folder) / "out.npz"))
    parity = dict(np.load(Path(tflite_dir) / "parity.npz")) if (Path(tflite_dir) / "parity.npz").exists() else {}
    n_lab, float_seconds = len(labels), out["float:seconds"]
    rows = []
    for name in files:
        stem = Path(name).stem
        logits, seconds = out[f"{stem}:logits"], out[f"{stem}:seconds"]
        fig = _figures(float_logits[:-n_lab], logits[:-n_lab], None)
        worst = f"{parity[stem][0]:.0f} step ({parity[stem][1]:.0f} layers)" if stem in parity else "-"
        rows.append(f"| {TFLITE_FILES[name]} | {out[f'{stem}:size'] / 1e6:.2f} | {1e3 * seconds:.2f} | "
                    f"{float_seconds / seconds:.2f}x | {fig['agreement']:.1f}% | "
                    f"{fig['sqnr']:.1f} | {int((logits[-n_lab:].argmax(1) == labels).sum())}/{n_lab} | {worst} |")
        print(rows[-1], flush=True)
    return rows


def run(name: str, n_calib: int, n_eval: int, batch: int) -> list:
    data = load_data(name, n_calib, n_eval, seed=0)
    torch_model = load_model(name)
    if name == "mobilenet_v2":
        keras_model = keras_mobilenet_v2_from_torch(torch_model.state_dict())
        evaluation, labels = data["extra"]["labelled"], data["extra_y"]["labelled"].numpy()
        eval_x = torch.cat([data["eval"], evaluation])
    else:
        keras_model = keras_fashion_model(name, torch_model.state_dict())
        eval_x, labels = data["eval"], data["eval_y"].numpy()
    calib = data["calib"]
    rows = []
    (q_torch, _), *t_torch = timed_calls(lambda: mct.ptq.pytorch_post_training_quantization(
        torch_model, lambda: ([calib[i:i + batch]] for i in range(0, len(calib), batch))))
    f_t, q_t = _predict_torch(torch_model, eval_x), _predict_torch(q_torch, eval_x)
    calib_k, eval_k = _nhwc(calib), _nhwc(eval_x)
    (q_keras, _), *t_keras = timed_calls(lambda: mct.ptq.keras_post_training_quantization(
        keras_model, lambda: ([calib_k[i:i + batch]] for i in range(0, len(calib_k), batch))))
    f_k, q_k = _predict_keras(keras_model, eval_k), _predict_keras(q_keras, eval_k)
    n_lab = len(labels)
    results = [(f"hwquant Keras ({keras.backend.backend()} backend)", t_keras, f_k, q_k),
               ("hwquant PyTorch", t_torch, f_t, q_t)]
    runs = [("hwquant Keras (tensorflow backend)", TF_PY, "hwquant_keras_tf.py"),
            ("MCT 2.6.1 Keras (TF 2.15)", MCT_KERAS_PY, "peer_mct_keras.py")]
    tflite_dir = tempfile.mkdtemp(prefix="hwquant-tflite-")
    for tool, python, script in runs if name == "mobilenet_v2" else ():
        if not python.exists():
            print(f"{tool}: {python} missing, skipped")
            continue
        (seconds, f_o, q_o), (mp_seconds, mp_o) = run_in_venv(python, script, keras_model, calib_k, eval_k, tflite_dir)
        gap = float(np.abs(f_o - f_k).max())
        if gap > 1e-3:  # the other run's float model must compute the same function as ours
            raise RuntimeError(f"{tool}: its float MobileNetV2 differs from ours: logits differ by {gap}")
        print(f"{tool}: float logits within {gap:.1e} of the Keras 3 model's here")
        results += [(tool, seconds, f_o, q_o), (f"{tool}, mixed precision: weights at 75 %", mp_seconds, f_o, mp_o)]
    for tool, seconds, f, q in results:
        if name == "mobilenet_v2":
            fig = _figures(f[:-n_lab], q[:-n_lab], None)
            fig["labelled"] = f"{int((q[-n_lab:].argmax(1) == labels).sum())}/{n_lab}"
        else:
            fig = _figures(f, q, labels)
            float_top1 = 100 * float((f.argmax(1) == labels).mean())
            fig["labelled"] = f"{100 * fig['labelled'] / len(labels):.2f} % (float {float_top1:.2f} %)"
        shown = f"{seconds[0]:.1f}" + (f" [{seconds[1]:.1f}]" if len(seconds) > 1 else "")
        rows.append(f"| {name} | {tool} | {shown} | {fig['agreement']:.1f}% | {fig['sqnr']:.1f} | {fig['labelled']} |")
        print(rows[-1], flush=True)
    files = tflite_rows(tflite_dir, eval_k, f_k, labels) if name == "mobilenet_v2" and TF_PY.exists() else []
    shutil.rmtree(tflite_dir, ignore_errors=True)
    return rows, files


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["mobilenet_v2", "plain_cnn", "mobile_cnn"])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    seed_everything(0)
    keras.utils.set_random_seed(0)
    rows, files = [], []
    for name in args.models:
        model_rows, model_files = run(name, n_calib=192, n_eval=490 if name == "mobilenet_v2" else 10000, batch=32)
        rows, files = rows + model_rows, files + model_files
    body = (f"`benchmarks/run_keras.py`, {datetime.date.today()}, 2 threads, Keras {keras.__version__}. The Keras "
            "models carry the PyTorch models' weights (MobileNetV2: keras.applications.MobileNetV2 with torchvision's "
            "weights, its padding and batch-norm epsilon edited to compute torchvision's function: logits within "
            "1.5e-5); both tools quantize with the IMX500 1.0 TPC on the same 192 calibration samples (batches of 32). "
            "MobileNetV2: 490 evaluation crops + 20 labelled images; Fashion-MNIST: the 10,000 test images. "
            f"Time: the quantization call, median of {REPEATS} calls in one process [the first call, one-time set-up "
            "included]; mixed precision: one call.\n\n"
            "| model | tool | time (s) | top-1 agreement | SQNR (dB) | labelled |\n|---|---|---:|---:|---:|---:|\n"
            + "\n".join(rows) + "\n\nMCT 2.6.1's Keras PTQ runs in its own venv (TensorFlow 2.15, Keras 2; "
            "`.venv-mct-keras`, benchmarks/peer_mct_keras.py) on the same weights, edited the same way, and data. "
            "Mixed precision: the weights memory limited to 75 % of what each tool's own "
            "keras_resource_utilization_data gives (the same definition: issue 16), default "
            "MixedPrecisionQuantizationConfig (distances measured on 32 images). "
            "hwquant on the TensorFlow backend runs in `.venv-tf` (scripts/setup_keras_tensorflow.sh).\n\n"
            "TFLite files of MobileNetV2 (the TensorFlow-backend run's models; MCT's exported by its own INT8 "
            "exporter), run by ai-edge-litert 2.3 (XNNPACK, 2 threads) at batch 1: size, median latency of one "
            "image, and fidelity to the float Keras model on the same 490 crops + 20 labelled images. Layer "
            "parity: each integer tensor against the simulated layer fed the file's own inputs (first crop), "
            "the worst layer.\n\n"
            "| file | size (MB) | latency (ms) | speed-up vs float | top-1 agreement | SQNR (dB) | labelled | layer parity |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(files) + "\n\n" + TFLITE_NOTES)
    print(body)
    if not args.no_write:
        report.replace_section(TITLE, body)
        print("wrote docs/BENCHMARKS.md")


if __name__ == "__main__":
    main()
