"""Keras training benchmark (issue 29): hwquant's Keras 3 GPTQ and QAT against MCT 2.6.1's Keras path
(TensorFlow 2.15, in .venv-mct-keras: benchmarks/peer_mct_keras_training.py) and against hwquant's
PyTorch GPTQ of the same weights, on the same data, in one run.

    KERAS_BACKEND=torch .venv/bin/python benchmarks/run_keras_training.py --parts gptq
    KERAS_BACKEND=torch .venv/bin/python benchmarks/run_keras_training.py --parts qat-fashion qat-mobilenet

- gptq: MobileNetV2 (torchvision's weights in the Keras architecture, benchmarks/keras_models.py), every
  kernel at --bits (4 and 8), 8-bit activations, IMX500 1.0 TPC, MCT's default GPTQ configuration
  (get_keras_gptq_config(n_epochs) / get_pytorch_gptq_config(n_epochs)) and the same without Hessian
  weights; calibration crops of all the natural photos; top-1 agreement and SQNR on the ImageNet images
  and their crops, top-1 on the labelled ImageNet images; the whole call's time.
- qat-fashion: the Fashion-MNIST CNNs at W8A8 and W4A4, QAT init on 512 training images, then
  ``model.fit`` for --qat-epochs epochs over --qat-train training images (Adam, lr 1e-4, batch 128,
  cross-entropy) by each tool: hwquant on Keras' torch backend (here), hwquant on Keras' TensorFlow backend
  (.venv-tf, benchmarks/hwquant_keras_training_tf.py, where that venv exists) and MCT; test accuracy right
  after init and after training, the first epoch's seconds and the fastest epoch's (the steady state).
- qat-mobilenet: MobileNetV2 with 4-bit kernels, a few hundred QAT steps distilling the float model's
  outputs on the calibration crops; agreement / SQNR / labelled top-1 before and after; the finalized model
  exported as INT8 TFLite (in .venv-tf: every layer against the simulation, latency against float).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
# torch's OpenMP threads wait for work without spinning: on a machine other jobs share, two spinning threads
# wait for each other at every operation while one of them is descheduled (a QAT epoch 3-7x slower than on one
# thread); TensorFlow's thread pool (MCT, hwquant's TensorFlow rows) is not OpenMP and is unaffected
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import hwquant as mct  # noqa: E402
from benchmarks import assets, models  # noqa: E402
from benchmarks.keras_models import keras_mobilenet_v2_from_torch, w4a4_core_config, weights_by_name  # noqa: E402

OUT = ROOT / ".cache" / "benchmarks" / "keras_training.json"
MCT_KERAS_PY = ROOT / ".venv-mct-keras" / "bin" / "python"
TF_PY = ROOT / ".venv-tf" / "bin" / "python"
NO_HESSIAN = {"use_hessian_based_weights": False, "use_hessian_sample_attention": False}


def nhwc(t) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(t).transpose(0, 2, 3, 1), dtype=np.float32)


def predict_keras(model, x: np.ndarray, batch: int = 64) -> np.ndarray:
    return np.concatenate([np.asarray(keras.ops.convert_to_numpy(model(x[i:i + batch], training=False)))
                           for i in range(0, len(x), batch)])


def predict_torch(model, x: np.ndarray, batch: int = 64) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate([model(torch.as_tensor(x[i:i + batch])).numpy() for i in range(0, len(x), batch)])


def figures(f: np.ndarray, q: np.ndarray, labels: np.ndarray) -> dict:
    """Top-1 agreement and SQNR against the float logits over every row, top-1 on the labelled first rows."""
    f64, q64 = f.astype(np.float64), q.astype(np.float64)
    return {"agreement": 100 * float((f64.argmax(1) == q64.argmax(1)).mean()),
            "sqnr": float(10 * np.log10((f64 ** 2).sum() / ((f64 - q64) ** 2).sum())),
            "labelled": int((q[:len(labels)].argmax(1) == labels).sum()), "n_labelled": len(labels),
            "float_labelled": int((f[:len(labels)].argmax(1) == labels).sum())}


def run_peer(args_list: list, arrays: dict, timeout: float, python: Path = MCT_KERAS_PY,
             script: str = "peer_mct_keras_training.py", who: str = "MCT") -> dict:
    """MCT 2.6.1's Keras path in its venv on `arrays` (or `script` in another venv: hwquant on Keras'
    TensorFlow backend in .venv-tf); its .npz results (or the error)."""
    if not python.exists():
        setup = "benchmarks/setup_peers.sh" if python == MCT_KERAS_PY else "scripts/setup_keras_tensorflow.sh"
        return {"error": f"{python} missing ({setup})"}
    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "in.npz", **arrays)
        try:
            done = subprocess.run([str(python), str(Path(__file__).with_name(script)),
                                   "--data", str(Path(folder) / "in.npz"), "--out", str(Path(folder) / "out.npz"),
                                   *args_list], timeout=timeout, capture_output=True, text=True,
                                  env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
        except subprocess.TimeoutExpired:
            return {"error": f"{who} not finished after {timeout:.0f} s"}
        if done.returncode != 0:
            return {"error": f"{who} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"}
        return dict(np.load(Path(folder) / "out.npz"))


# ------------------------------------------------------------------------------------------ GPTQ
def gptq_part(args) -> list:
    calib_t, evals_t, labels_t = assets.all_photos_and_imagenet_sets(args.n_calib, args.n_eval, 0)
    labels = np.asarray(labels_t)
    torch_model = models.mobilenet_v2_pretrained().eval()
    keras_model = keras_mobilenet_v2_from_torch(torch_model.state_dict())
    calib, evals = np.asarray(calib_t, np.float32), np.asarray(evals_t, np.float32)
    calib_k, evals_k = nhwc(calib), nhwc(evals)
    f_k, f_t = predict_keras(keras_model, evals_k), predict_torch(torch_model, evals)
    rows = []
    batch = 32
    for bits in args.bits:
        core = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=bits))
        for hessian in {"both": (True, False), "on": (True,), "off": (False,)}[args.hessian]:
            kw = {} if hessian else NO_HESSIAN
            label = f"W{bits}A8, {args.n_calib} crops, {args.epochs} epochs{'' if hessian else ', no Hessian'}"
            cfg = mct.gptq.get_keras_gptq_config(n_epochs=args.epochs, **kw)
            t0 = time.perf_counter()
            q, info = mct.gptq.keras_gradient_post_training_quantization(
                keras_model, lambda: ([calib_k[i:i + batch]] for i in range(0, len(calib_k), batch)), cfg,
                core_config=core)
            seconds = time.perf_counter() - t0
            rows.append({"setting": label, "tool": f"hwquant Keras GPTQ ({keras.backend.backend()} backend)",
                         "seconds": seconds, **figures(f_k, predict_keras(q, evals_k), labels)})
            print(rows[-1], flush=True)
            cfg_t = mct.gptq.get_pytorch_gptq_config(n_epochs=args.epochs, **kw)
            torch.manual_seed(0)
            t0 = time.perf_counter()
            qt, _ = mct.gptq.pytorch_gradient_post_training_quantization(
                torch_model, lambda: ([torch.as_tensor(calib[i:i + batch])] for i in range(0, len(calib), batch)),
                core_config=core, gptq_config=cfg_t)
            seconds = time.perf_counter() - t0
            rows.append({"setting": label, "tool": "hwquant PyTorch GPTQ (same weights)", "seconds": seconds,
                         **figures(f_t, predict_torch(qt.eval(), evals), labels)})
            print(rows[-1], flush=True)
            if args.no_mct:
                continue
            peer = run_peer(["--mode", "gptq", "--bits", str(bits), "--epochs", str(args.epochs),
                             *([] if hessian else ["--no-hessian"])],
                            {"calib": calib_k, "eval": evals_k, **weights_by_name(keras_model)}, args.mct_timeout)
            if "error" in peer:
                rows.append({"setting": label, "tool": "MCT 2.6.1 Keras GPTQ (TF 2.15)", "error": peer["error"]})
            else:
                gap = float(np.abs(peer["float_logits"] - f_k).max())
                assert gap < 1e-2, f"MCT's float MobileNetV2 differs from ours by {gap}"
                rows.append({"setting": label, "tool": "MCT 2.6.1 Keras GPTQ (TF 2.15)", "seconds": float(peer["seconds"]),
                             **figures(peer["float_logits"], peer["quantized_logits"], labels)})
            print(rows[-1], flush=True)
    return rows


class EpochClock(keras.callbacks.Callback):
    """Each epoch's seconds: the fastest is the steady state (the first also traces or warms up the step)."""

    def __init__(self):
        super().__init__()
        self.seconds: list = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.start)


# ------------------------------------------------------------------------------------------ QAT, Fashion-MNIST
def qat_fashion_part(args) -> list:
    from benchmarks.keras_models import keras_fashion_model
    train_x, train_y, test_x, test_y = assets.fashion_mnist()
    tx, ty = nhwc(train_x), np.asarray(train_y)
    test_k, test_y = nhwc(test_x), np.asarray(test_y)
    order = np.random.default_rng(0).permutation(len(tx))
    calib, fit_x, fit_y = tx[order[:512]], tx[order[512:512 + args.qat_train]], ty[order[512:512 + args.qat_train]]
    rows = []
    for name in ("plain_cnn", "mobile_cnn"):
        state = models.trained_fashion_model(name).state_dict()
        model = keras_fashion_model(name, state)
        float_acc = float((predict_keras(model, test_k, 1000).argmax(1) == test_y).mean())
        for bits in ("w8a8", "w4a4"):
            core = w4a4_core_config(mct, keras.layers, model) if bits == "w4a4" else mct.core.CoreConfig()
            keras.utils.set_random_seed(0)
            t0 = time.perf_counter()
            qat, _, _ = mct.qat.keras_quantization_aware_training_init_experimental(
                model, lambda: ([calib[i:i + 64]] for i in range(0, len(calib), 64)), core_config=core)
            init_s = time.perf_counter() - t0
            init_acc = float((predict_keras(qat, test_k, 1000).argmax(1) == test_y).mean())
            qat.compile(optimizer=keras.optimizers.Adam(1e-4),
                        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            clock = EpochClock()
            qat.fit(fit_x, fit_y, epochs=args.qat_epochs, batch_size=128, verbose=0, shuffle=False, callbacks=[clock])
            epoch_s, first_s = min(clock.seconds), clock.seconds[0]
            final = mct.qat.keras_quantization_aware_training_finalize_experimental(qat)
            acc = float((predict_keras(final, test_k, 1000).argmax(1) == test_y).mean())
            setting = f"{bits.upper()}, {args.qat_epochs} epoch(s) over {args.qat_train} images"
            rows.append({"model": name, "setting": setting, "tool": f"hwquant Keras QAT ({keras.backend.backend()} backend)",
                         "accuracy": acc, "init_accuracy": init_acc, "float_accuracy": float_acc, "init_seconds": init_s,
                         "epoch_seconds": epoch_s, "first_epoch_seconds": first_s})
            print(rows[-1], flush=True)
            # then the same steps by hwquant on Keras' TensorFlow backend (.venv-tf) and by MCT, back to back
            tool_args = ["--model", name, "--epochs", str(args.qat_epochs), *(["--w4a4"] if bits == "w4a4" else [])]
            arrays = {"calib": calib, "train_x": fit_x, "train_y": fit_y, "test_x": test_k, "test_y": test_y,
                      **{f"sd:{k}": v.numpy() for k, v in state.items()}}
            others = [("MCT 2.6.1 Keras QAT (TF 2.15)", MCT_KERAS_PY, "peer_mct_keras_training.py", ["--mode", "qat"])]
            if TF_PY.exists():
                others.insert(0, ("hwquant Keras QAT (tensorflow backend)", TF_PY, "hwquant_keras_training_tf.py", []))
            for tool, python, script, mode in others:
                out = run_peer([*mode, *tool_args], arrays, args.mct_timeout, python, script, tool.split()[0])
                rows.append({"model": name, "setting": setting, "tool": tool,
                             **({"error": out["error"]} if "error" in out else
                                {k: float(out[k]) for k in ("accuracy", "init_accuracy", "float_accuracy", "init_seconds",
                                                             "epoch_seconds", "first_epoch_seconds")})})
                print(rows[-1], flush=True)
    return rows


# ------------------------------------------------------------------------------------------ QAT, MobileNetV2
def qat_mobilenet_part(args) -> list:
    """4-bit kernels: QAT init on 64 crops, then --qat-steps steps of batch 16 distilling the float model's
    output distribution on the calibration crops (no labels), Adam at --qat-lr; before / after on the
    ImageNet images; the finalized model exported as INT8 TFLite."""
    calib_t, evals_t, labels_t = assets.all_photos_and_imagenet_sets(args.qat_crops, args.n_eval, 0)
    labels = np.asarray(labels_t)
    keras_model = keras_mobilenet_v2_from_torch(models.mobilenet_v2_pretrained().state_dict())
    train_x, evals = nhwc(calib_t), nhwc(evals_t)
    f_eval = predict_keras(keras_model, evals)
    soft_targets = np.asarray(keras.ops.convert_to_numpy(keras.ops.softmax(predict_keras(keras_model, train_x))))
    core = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=4))
    keras.utils.set_random_seed(0)
    t0 = time.perf_counter()
    qat, _, _ = mct.qat.keras_quantization_aware_training_init_experimental(
        keras_model, lambda: ([train_x[i:i + 32]] for i in range(0, 64, 32)), core_config=core)
    init_s = time.perf_counter() - t0
    setting = f"W4A8, {args.qat_steps} steps of 16 crops"
    rows = [{"setting": setting, "tool": "QAT init (= PTQ)", "seconds": init_s,
             **figures(f_eval, predict_keras(qat, evals), labels)}]
    print(rows[-1], flush=True)
    qat.compile(optimizer=keras.optimizers.Adam(args.qat_lr), loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    n = args.qat_steps * 16
    order = np.concatenate([np.random.default_rng(e).permutation(len(train_x)) for e in range(-(-n // len(train_x)))])[:n]
    t0 = time.perf_counter()
    qat.fit(train_x[order], soft_targets[order], epochs=1, batch_size=16, verbose=0, shuffle=False)
    step_s = (time.perf_counter() - t0) / args.qat_steps
    trained = predict_keras(qat, evals)
    final = mct.qat.keras_quantization_aware_training_finalize_experimental(qat)
    finalized = predict_keras(final, evals)
    assert np.array_equal(finalized, trained), "the finalized model differs from the trained one"
    rows.append({"setting": setting, "tool": f"after QAT ({keras.backend.backend()} backend), finalized",
                 "step_seconds": step_s, **figures(f_eval, finalized, labels)})
    print(rows[-1], flush=True)
    if TF_PY.exists():
        rows += tflite_of_finalized(final, keras_model, evals, f_eval, labels)
    return rows


def tflite_of_finalized(final, keras_model, evals, f_eval, labels) -> list:
    """The finalized model exported as INT8 TFLite in .venv-tf (the .keras file read on the TensorFlow
    backend): its worst layer against the simulation, its latency against the float TFLite file's."""
    with tempfile.TemporaryDirectory() as folder:
        final.save(Path(folder) / "final.keras")
        np.savez(Path(folder) / "in.npz", eval=evals, **weights_by_name(keras_model))
        subprocess.run([str(TF_PY), str(Path(__file__).with_name("keras_qat_tflite.py")), "--model",
                        str(Path(folder) / "final.keras"), "--data", str(Path(folder) / "in.npz"), "--dir", folder],
                       check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
        subprocess.run([str(TF_PY), str(Path(__file__).with_name("tflite_files.py")), "--data", str(Path(folder) / "in.npz"),
                        "--out", str(Path(folder) / "out.npz"), str(Path(folder) / "float.tflite"),
                        str(Path(folder) / "qat_int8.tflite")],
                       check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
        out, parity = dict(np.load(Path(folder) / "out.npz")), np.load(Path(folder) / "parity.npz")
    rows = []
    for stem, tool in (("float", "float TFLite"), ("qat_int8", "finalized QAT model, INT8 TFLite")):
        row = {"setting": "TFLite (ai-edge-litert, batch 1, 2 threads)", "tool": tool,
               "size_mb": float(out[f"{stem}:size"]) / 1e6, "latency_ms": 1e3 * float(out[f"{stem}:seconds"]),
               "speedup": float(out["float:seconds"]) / float(out[f"{stem}:seconds"]),
               **figures(f_eval, out[f"{stem}:logits"], labels)}
        if stem == "qat_int8":
            row["worst_layer_steps"], row["layers_compared"] = float(parity["steps"]), int(parity["layers"])
        rows.append(row)
        print(row, flush=True)
    return rows


def render(results: dict) -> str:
    """The tables of docs/BENCHMARKS.md's "Keras training" section from the results file."""
    out = []
    if "gptq" in results:
        out += ["| setting | tool | time (s) | top-1 agreement | SQNR (dB) | labelled top-1 |", "|---|---|---|---|---|---|"]
        for r in results["gptq"]:
            if "error" in r:
                out.append(f"| {r['setting']} | {r['tool']} | {r['error']} | | | |")
                continue
            out.append(f"| {r['setting']} | {r['tool']} | {r['seconds']:.0f} | {r['agreement']:.1f} % | {r['sqnr']:.2f} | "
                       f"{r['labelled']}/{r['n_labelled']} (float {r['float_labelled']}) |")
        out.append("")
    if "qat-fashion" in results:
        out += ["| model | setting | tool | after init | test accuracy | float | QAT init (s) | first epoch (s) | "
                "fastest epoch (s) | fastest epoch vs MCT's |", "|---|---|---|---|---|---|---|---|---|---|"]
        mct_epoch = {(r["model"], r["setting"]): r["epoch_seconds"] for r in results["qat-fashion"]
                     if r["tool"].startswith("MCT") and "error" not in r}
        for r in results["qat-fashion"]:
            if "error" in r:
                out.append(f"| {r['model']} | {r['setting']} | {r['tool']} | {r['error']} | | | | | | |")
                continue
            mct = mct_epoch.get((r["model"], r["setting"]))
            init = f"{100 * r['init_accuracy']:.2f} %" if "init_accuracy" in r else ""
            out.append(f"| {r['model']} | {r['setting']} | {r['tool']} | {init} | {100 * r['accuracy']:.2f} % | "
                       f"{100 * r['float_accuracy']:.2f} % | {r['init_seconds']:.1f} | {r.get('first_epoch_seconds', 0):.1f} | "
                       f"{r['epoch_seconds']:.2f} | "
                       f"{'' if mct is None else format(r['epoch_seconds'] / mct, '.2f') + 'x'} |")
        out.append("")
    if "qat-mobilenet" in results:
        out += ["| setting | model | top-1 agreement | SQNR (dB) | labelled top-1 | time / size / latency |",
                "|---|---|---|---|---|---|"]
        for r in results["qat-mobilenet"]:
            cost = (f"init {r['seconds']:.1f} s" if "seconds" in r else f"{r['step_seconds']:.2f} s per step"
                    if "step_seconds" in r else f"{r['size_mb']:.2f} MB, {r['latency_ms']:.2f} ms ({r['speedup']:.2f}x float)")
            if "worst_layer_steps" in r:
                cost += f"; worst of {r['layers_compared']} layers {r['worst_layer_steps']:.0f} step from the simulation"
            out.append(f"| {r['setting']} | {r['tool']} | {r['agreement']:.1f} % | {r['sqnr']:.2f} | "
                       f"{r['labelled']}/{r['n_labelled']} (float {r['float_labelled']}) | {cost} |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="+", default=["gptq", "qat-fashion", "qat-mobilenet"])
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--no-mct", action="store_true", help="GPTQ: hwquant's Keras and PyTorch GPTQ only")
    ap.add_argument("--n-calib", type=int, default=64)
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--mct-timeout", type=float, default=1200)
    ap.add_argument("--qat-train", type=int, default=6400, help="training images of the Fashion-MNIST QAT")
    ap.add_argument("--qat-epochs", type=int, default=1)
    ap.add_argument("--qat-steps", type=int, default=300, help="MobileNetV2 QAT steps (batch 16)")
    ap.add_argument("--qat-crops", type=int, default=512, help="MobileNetV2 QAT training crops")
    ap.add_argument("--qat-lr", type=float, default=1e-5)
    ap.add_argument("--hessian", choices=["both", "on", "off"], default="both", help="GPTQ with / without Hessian weights")
    ap.add_argument("--render", action="store_true", help="print the tables of the results file and stop")
    args = ap.parse_args(argv)
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    if args.render:
        print(render(results))
        return
    torch.set_num_threads(2)
    for part in args.parts:
        results[part] = {"gptq": gptq_part, "qat-fashion": qat_fashion_part,
                          "qat-mobilenet": qat_mobilenet_part}[part](args)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
