"""Real models benchmark: pretrained networks shipped by packages beyond torchvision (a transformer
text encoder, LSTM / GRU models, detectors, OCR models, a small MobileNetV3 classifier, a voice
activity detector with an STFT front end, and models shipped as ONNX converted by onnx2torch), quantized
by hwquant, by MCT 2.6.1 (its own venv) and by ONNX Runtime's quantize_static, in one run.

    bash benchmarks/fetch_real_models.sh && bash benchmarks/setup_peers.sh
    .venv/bin/python benchmarks/run_real_models.py            # writes its section of docs/BENCHMARKS.md
    .venv/bin/python benchmarks/run_real_models.py --no-write --models mtcnn_onet efficientnet_lite0

Each tool quantizes with its defaults on the same calibration samples (hwquant and MCT with the
IMX500 1.0 TPC; ONNX Runtime QDQ, per-channel int8 weights, int8 activations, MinMax calibration;
hwquant again with the TFLite TPC, whose uniform activations are ORT's grid)
and is evaluated on other samples against the float model: whether it captured the model, wall time
of the quantization call, output SQNR (all outputs, flattened) and a task agreement with the float
model (cosine of embeddings, decoded CTC strings, text-region F1, face decisions, top-1).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import math
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import real_models, regression, report  # noqa: E402
from benchmarks.run_ptq import run_mct, seed_everything  # noqa: E402

SECTION = "Real models from packages: hwquant, MCT 2.6.1, ONNX Runtime"
REGRESSION_NAME = "real_models"  # benchmarks/results/real_models.json: the figures the next run compares with


def flat_outputs(model, inputs: List[torch.Tensor], batch: int = 32) -> torch.Tensor:
    """All outputs of `model`, flattened per sample and concatenated (what every tool returns)."""
    outs = []
    with torch.no_grad():
        for i in range(0, len(inputs[0]), batch):
            leaves = torch.utils._pytree.tree_leaves(model(*[t[i:i + batch] for t in inputs]))
            outs.append(torch.cat([t.float().reshape(t.shape[0], -1) for t in leaves], 1))
    return torch.cat(outs)


def sqnr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    noise = (ref - out).pow(2).mean().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.pow(2).mean().item() / noise)


# ---- task agreement with the float model, on the flattened outputs --------------------------------
def _cosine(ref: torch.Tensor, out: torch.Tensor) -> float:
    """Mean cosine similarity of each quantized embedding with its float embedding."""
    return float(torch.nn.functional.cosine_similarity(ref, out, dim=1).mean())


def _ctc_agreement(steps: int, classes: int) -> Callable:
    def metric(ref, out):
        def decode(x):
            ids = x.reshape(len(x), steps, classes).argmax(-1).tolist()
            return [tuple(c for j, c in enumerate(seq) if c != 0 and (j == 0 or c != seq[j - 1])) for seq in ids]
        return float(np.mean([a == b for a, b in zip(decode(ref), decode(out))]))
    return metric


def _text_region_f1(ref, out):
    shape = (len(ref), 2, 128, 128)
    a, b = ref.reshape(shape)[:, 0] > 0.4, out.reshape(shape)[:, 0] > 0.4
    tp = (a & b).sum().item()
    return 2 * tp / max(a.sum().item() + b.sum().item(), 1)


def _probability_map_f1(shape: tuple, threshold: float) -> Callable:
    """F1 of the pixels above `threshold` in the quantized map against those of the float map."""
    def metric(ref, out):
        a, b = ref.reshape(len(ref), *shape) > threshold, out.reshape(len(out), *shape) > threshold
        tp = (a & b).sum().item()
        return 2 * tp / max(a.sum().item() + b.sum().item(), 1)
    return metric


def _yolox_detections(ref, out):
    """F1 of the confident anchors (objectness x class > 0.3) of the quantized model against the float model's."""
    def confident(x):
        x = x.reshape(len(x), -1, 6)
        return x[..., 4] * x[..., 5] > 0.3
    a, b = confident(ref), confident(out)
    tp = (a & b).sum().item()
    return 2 * tp / max(a.sum().item() + b.sum().item(), 1)


def _face_decisions(prob_slice: slice, channels_first: bool = False, hw: int = 0) -> Callable:
    def metric(ref, out):
        def decide(x):
            p = x[:, prob_slice]
            if channels_first:
                p = p.reshape(len(x), 2, hw * hw)
                return p[:, 1] > p[:, 0]
            return p[:, 1] > p[:, 0]
        return float((decide(ref) == decide(out)).float().mean())
    return metric


def _top1(ref, out):
    return float((ref.argmax(1) == out.argmax(1)).float().mean())


TASKS: Dict[str, tuple] = {  # name: (metric label, function of (float, quantized) flattened outputs)
    "minilm_l6": ("embedding cosine", _cosine),
    "resemblyzer_lstm": ("embedding cosine", _cosine),
    "legere_crnn_gru": ("string agreement", _ctc_agreement(64, 122)),
    "easyocr_crnn_lstm": ("string agreement", _ctc_agreement(79, 97)),
    "craft_text_detector": ("text-region F1", _text_region_f1),
    "mtcnn_pnet": ("face-decision agreement", _face_decisions(slice(4 * 75 * 75, 6 * 75 * 75), True, 75)),
    "mtcnn_rnet": ("face-decision agreement", _face_decisions(slice(4, 6))),
    "mtcnn_onet": ("face-decision agreement", _face_decisions(slice(14, 16))),
    "efficientnet_lite0": ("top-1 agreement", _top1),
    "ppocr_cls_mobilenetv3": ("top-1 agreement", _top1),
    "silero_vad_stft": ("speech-decision agreement", lambda ref, out: float(((ref > 0.5) == (out > 0.5)).float().mean())),
    "ppocr_det_dbnet": ("text-region F1 (p > 0.3)", _probability_map_f1((320, 320), 0.3)),
    "ppocr_rec_svtr": ("string agreement", _ctc_agreement(40, 6625)),
    "ddddocr_det_yolox": ("confident-anchor F1", _yolox_detections),
    "crepe_pitch": ("pitch-bin agreement (within 1 bin)",
                    lambda ref, out: float(((ref.argmax(1) - out.argmax(1)).abs() <= 1).float().mean())),
}


# ---- the three tools ---------------------------------------------------------------------------
def run_hwquant(model, calib: List[torch.Tensor], evals: List[torch.Tensor], batch: int, device: str = "imx500",
                tpc=None) -> dict:
    """hwquant PTQ with its defaults on `device`'s TPC (imx500: the default one; tflite: uniform
    activations, the grid ONNX Runtime's QDQ uses), or on `tpc` when given."""
    import hwquant as mct

    def rep_gen():
        for i in range(0, len(calib[0]), batch):
            yield [t[i:i + batch] for t in calib]
    t0 = time.perf_counter()
    try:
        tpc = tpc or mct.get_target_platform_capabilities("pytorch", device)
        q, info = mct.ptq.pytorch_post_training_quantization(model, rep_gen, target_platform_capabilities=tpc)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
    return {"seconds": time.perf_counter() - t0, "out": flat_outputs(q, evals), "float": len(info.float_layers)}


def run_onnxruntime(model, calib: List[torch.Tensor], evals: List[torch.Tensor], batch: int, work: Path) -> dict:
    names = [f"input_{i}" for i in range(len(calib))]
    float_path, q_path = work / "float.onnx", work / "ort_int8.onnx"
    def export(dynamo: bool):
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            if dynamo:  # fixed batch size: evaluation runs in batches of `batch`
                torch.onnx.export(model.eval(), tuple(t[:batch] for t in calib), str(float_path), dynamo=True,
                                  opset_version=18, input_names=names, verbose=False)
            else:
                torch.onnx.export(model.eval(), tuple(t[:1] for t in calib), str(float_path), dynamo=False,
                                  opset_version=17, input_names=names, dynamic_axes={n: {0: "batch"} for n in names})
    try:
        export(dynamo=False)
    except Exception:  # noqa: BLE001 - the legacy exporter refuses some ops (LSTMCell's unsafe_chunk)
        try:
            export(dynamo=True)
        except Exception as e:  # noqa: BLE001
            return {"error": f"ONNX export failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}"}
    return _ort_quantize_and_run(float_path, q_path, names, calib, evals, batch)


def run_onnxruntime_shipped(name: str, calib: List[torch.Tensor], evals: List[torch.Tensor], batch: int,
                            work: Path) -> dict:
    """ONNX Runtime on a model that ships as ONNX: the file the onnx2torch conversion starts from
    (real_models.prepared_onnx: Paddle's Constant-node weights as initializers, YOLOX's reshapes batch-free)
    quantized directly, since exporting the converted model back to ONNX fails."""
    import onnx
    from onnx import version_converter
    try:
        m = real_models.prepared_onnx(name)
    except Exception as e:  # noqa: BLE001
        return {"error": f"ONNX file not prepared: {type(e).__name__}: {str(e).splitlines()[0][:100]}"}
    # The measured shapes (value_info, batch 1) serve onnx2torch only; the declared batch is freed so that
    # the quantizer and the session take batches of `batch` (YOLOX's file declares 1).
    del m.graph.value_info[:]
    for v in list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_param = "batch"
    # Per-channel DequantizeLinear (an axis) needs opset 13; quantize_static writes it into the Paddle files'
    # opset 12 (and YOLOX's 11) as is, which ONNX Runtime then refuses to load.
    if next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:
        m = version_converter.convert_version(m, 13)
    float_path, q_path = work / "shipped.onnx", work / "shipped_ort_int8.onnx"
    onnx.save(m, str(float_path))
    return _ort_quantize_and_run(float_path, q_path, [i.name for i in m.graph.input], calib, evals, batch)


def _ort_quantize_and_run(float_path: Path, q_path: Path, names: List[str], calib: List[torch.Tensor],
                          evals: List[torch.Tensor], batch: int) -> dict:
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    class Reader:
        def __init__(self):
            self.it = iter([{n: t[i:i + batch].numpy() for n, t in zip(names, calib)}
                            for i in range(0, len(calib[0]), batch)])

        def get_next(self):
            return next(self.it, None)
    t0 = time.perf_counter()
    try:
        quantize_static(str(float_path), str(q_path), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
    except Exception as e:  # noqa: BLE001
        return {"error": f"quantize_static failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}"}
    seconds = time.perf_counter() - t0
    from benchmarks.metrics import onnx_layers_left_float
    outs = []
    try:  # a quantized file ONNX Runtime refuses to load is a cell of the table, not the end of the run
        sess = ort.InferenceSession(str(q_path), providers=["CPUExecutionProvider"])
        for i in range(0, len(evals[0]), batch):
            res = sess.run(None, {n: t[i:i + batch].numpy() for n, t in zip(names, evals)})
            outs.append(torch.cat([torch.from_numpy(r).float().reshape(r.shape[0], -1) for r in res], 1))
    except Exception as e:  # noqa: BLE001
        return {"error": f"quantized model not run: {type(e).__name__}: {str(e).splitlines()[0][:100]}"}
    return {"seconds": seconds, "out": torch.cat(outs), "float": onnx_layers_left_float(q_path)}


def _cell(res: dict, ref: torch.Tensor, task: Callable) -> str:
    if "error" in res or "skipped" in res:
        return f"not quantized: {(res.get('error') or res.get('skipped'))[:110]}".replace("|", "/")
    out = res["out"]
    return f"{res['seconds']:.1f} s, {sqnr_db(ref, out):.1f} dB, {task(ref, out):.3f}, {res.get('float', '?')}"


def _figures(res: dict, ref: torch.Tensor, task: Callable) -> dict:
    if "out" not in res:
        return {}
    return {"sqnr_db": sqnr_db(ref, res["out"]), "task": task(ref, res["out"]), "seconds": res["seconds"],
            "float_layers": res.get("float")}


def sample_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options that choose the models and their samples (shared with benchmarks/run_snc_imx500.py)."""
    ap.add_argument("--models", nargs="+", default=list(real_models.REGISTRY), choices=list(real_models.REGISTRY))
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    return ap


def main(argv=None) -> None:
    ap = sample_arguments(argparse.ArgumentParser(description=__doc__,
                                                  formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    log_dir = report.log_dir()
    work = Path(tempfile.mkdtemp(prefix="hwquant_real_bench_"))
    rows = []
    before, figures = regression.previous(REGRESSION_NAME), {}
    for name in args.models:
        seed_everything(0)
        rm = real_models.REGISTRY[name]()
        calib, evals = rm.make_inputs(args.calib, 0), rm.make_inputs(args.eval, 1)
        ref = flat_outputs(rm.model, evals)
        label, task = TASKS[name]
        params = sum(p.numel() for p in rm.model.parameters())
        ours = run_hwquant(rm.model, calib, evals, args.batch)
        data_file = work / f"{name}.pt"
        torch.save({"calib": calib, "eval": evals}, data_file)
        theirs = run_mct(f"real:{name}", data_file, "default", log_dir, batch=args.batch, timeout=args.timeout)
        if "eval_logits" in theirs:
            theirs = {"seconds": theirs["ptq_seconds"], "out": theirs["eval_logits"],
                      "float": theirs.get("layers_left_float")}
        (work / name).mkdir(exist_ok=True)
        ort_res = (run_onnxruntime_shipped(name, calib, evals, args.batch, work / name)
                   if name in real_models.ONNX_MODELS else run_onnxruntime(rm.model, calib, evals, args.batch, work / name))
        ours_tflite = run_hwquant(rm.model, calib, evals, args.batch, device="tflite")
        row = (f"| {name} | {params / 1e6:.2f} M | {label} | {_cell(ours, ref, task)} | {_cell(theirs, ref, task)} "
               f"| {_cell(ours_tflite, ref, task)} | {_cell(ort_res, ref, task)} |")
        rows.append(row)
        print(row, flush=True)
        figures[name] = {tool: _figures(res, ref, task) for tool, res in
                         (("hwquant_imx500", ours), ("mct_imx500", theirs), ("hwquant_tflite", ours_tflite),
                          ("onnxruntime", ort_res)) if "out" in res}
    found = regression.drops(before, figures)
    print("figures down since the previous run: " + ("; ".join(found) if found else "none"), flush=True)
    if not args.no_write:
        regression.save(REGRESSION_NAME, figures, note=f"benchmarks/run_real_models.py, {datetime.date.today()}")

    body = (f"Measured {datetime.date.today()} on {platform.machine()} CPU ({args.threads} threads), by "
            f"`benchmarks/run_real_models.py`: {args.calib} calibration samples and {args.eval} other evaluation "
            "samples per model (`benchmarks/real_models/`: real images and rendered text lines, synthetic "
            "speech), each tool with its defaults (hwquant and MCT: IMX500 1.0 TPC; ONNX Runtime: QDQ, per-channel "
            "int8 weights, int8 activations, MinMax, on the shipped file for models that ship as ONNX; against it, "
            "hwquant with the TFLite TPC, uniform activations "
            "as in ORT's QDQ). Each cell: quantization wall time, output SQNR against float (all outputs "
            "flattened), task agreement with the float model, layers left float (layers that carry weights none "
            "of which is quantized: hwquant lists them in UserInformation.float_layers; MCT's are layers outside a "
            "weight-quantizing wrapper; ONNX Runtime's, weight-reading operators fed a float initializer). Every "
            "figure is compared with the previous run's (`benchmarks/results/real_models.json`) and drops beyond "
            "0.3 dB or 0.01 agreement are named below the table.\n\n"
            "| model | params | task agreement | hwquant (IMX500) | MCT 2.6.1 (IMX500) | hwquant (TFLite) | ONNX Runtime |\n"
            "|---|---|---|---|---|---|---|\n"
            + "\n".join(rows)
            + "\n\nFigures down since the previous run: " + ("; ".join(found) if found else "none") + ".")
    report.publish(SECTION, body, write=not args.no_write)


if __name__ == "__main__":
    main()
