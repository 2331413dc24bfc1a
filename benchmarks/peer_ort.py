"""Peer runner: ONNX Runtime static quantization (QDQ, per-channel int8) of the float model's ONNX export.

Used in-process by benchmarks/run_ptq.py (ONNX Runtime lives in .venv), or on its own:

    .venv/bin/python benchmarks/peer_ort.py --model mobilenet_v2 --data in.pt --out out.pt \
        [--methods MinMax Entropy Percentile] [--batch 32]

with the same --data/--out layout as benchmarks/peer_mct.py (one output entry per method).
Only quantize_static is timed (it includes ORT's calibration runs); the ONNX export and ORT's
recommended pre-processing (quant_pre_process: shape inference + graph optimisation) are timed
separately.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for benchmarks.*

METHODS = ("MinMax", "Entropy", "Percentile")


def export_onnx(model: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    # The TorchScript exporter (dynamo=False) needs no onnxscript and folds eval-mode BatchNorm into
    # the convolutions; the batch axis is dynamic so calibration and evaluation can use any batch.
    torch.onnx.export(model.eval(), (example[:1],), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


class _BatchReader:
    """CalibrationDataReader over fixed batches; len/set_range let ORT calibrate batch by batch."""

    def __init__(self, calib: torch.Tensor, batch: int):
        self.batches = [calib[i:i + batch].numpy() for i in range(0, len(calib), batch)]
        self.set_range(0, len(self.batches))

    def __len__(self):
        return len(self.batches)

    def set_range(self, start_index: int, end_index: int):
        self._it = iter(self.batches[start_index:end_index])

    def get_next(self):
        b = next(self._it, None)
        return None if b is None else {"input": b}


def _session(path: Path, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _predict(sess, x: torch.Tensor, batch: int = 64) -> torch.Tensor:
    outs = [sess.run(None, {"input": x[i:i + batch].numpy()})[0] for i in range(0, len(x), batch)]
    return torch.from_numpy(np.concatenate(outs)).float()


def run_ort(model: torch.nn.Module, calib: torch.Tensor, eval_x: torch.Tensor, extra: dict | None = None,
            methods=METHODS, batch: int = 32, threads: int = 2, chunk: int | None = None) -> dict:
    """Quantize with each calibration method; returns {method: {"ptq_seconds", "eval_logits", ...}}.

    chunk=None calibrates in one pass, ORT's default: its calibrators keep every intermediate tensor of
    the whole calibration set in memory (about 13 GB peak for MobileNetV2 with 192 crops). chunk=k
    feeds k batches per collect step instead (ORT's CalibStridedMinMax option; histograms are merged
    between steps): about 3 GB with k=1, ~30% slower, slightly different ranges.
    """
    import onnxruntime
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quant_pre_process, quantize_static

    extra = extra or {}
    results = {}
    with tempfile.TemporaryDirectory(prefix="hwquant_ort_") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        export_onnx(model, calib, tmp / "float.onnx")
        export_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        quant_pre_process(str(tmp / "float.onnx"), str(tmp / "prep.onnx"))
        prep_s = time.perf_counter() - t0
        for name in methods:
            np.random.seed(0)  # ORT's calibrators are deterministic; this only guards future changes
            out = tmp / f"q_{name}.onnx"
            t0 = time.perf_counter()
            quantize_static(
                str(tmp / "prep.onnx"), str(out), _BatchReader(calib, batch),
                quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,  # ORT's defaults, explicit
                calibrate_method=getattr(CalibrationMethod, name),
                extra_options={} if chunk is None else {"CalibStridedMinMax": chunk},
            )
            seconds = time.perf_counter() - t0
            sess = _session(out, threads)
            results[name] = {
                "tool": f"ORT {onnxruntime.__version__} {name}",
                "ptq_seconds": seconds,
                "export_seconds": export_s,
                "preprocess_seconds": prep_s,
                "calib_chunk_batches": chunk,
                "eval_logits": _predict(sess, eval_x),
                "extra_logits": {k: _predict(sess, v) for k, v in extra.items()},
            }
            print(f"ORT {onnxruntime.__version__} {name}: quantize_static {seconds:.1f} s", flush=True)
    return results


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=None, help="batches per calibration step (default: all)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from benchmarks import models
    model = (models.mobilenet_v2_pretrained() if args.model == "mobilenet_v2"
             else models.load_cached_fashion_model(args.model))
    data = torch.load(args.data, weights_only=True)
    res = run_ort(model, data["calib"], data["eval"], data.get("extra", {}), args.methods, args.batch, args.threads,
                  args.chunk)
    torch.save(res, args.out)


if __name__ == "__main__":
    main()
