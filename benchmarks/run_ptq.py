"""Side-by-side PTQ benchmark: our PTQ vs MCT 2.6.1 (own venv) vs ONNX Runtime quantize_static.

    .venv/bin/python benchmarks/run_ptq.py                       # everything, writes docs/BENCHMARKS.md
    .venv/bin/python benchmarks/run_ptq.py --models plain_cnn --no-write
    .venv/bin/python benchmarks/run_ptq.py --mct-variants default w4 mp --ort-methods Percentile

Prerequisites: scripts/setup.sh, scripts/fetch_assets.sh, benchmarks/setup_peers.sh (for MCT).
Same calibration and evaluation data for every tool, calibration batches of 32, fixed seeds; the
tools run one after another (never concurrently) so their wall times are comparable.
MobileNetV2 (real ImageNet weights): calibration and evaluation crops from disjoint natural images;
fidelity vs float (top-1 agreement, output SQNR) and labelled top-1 on the 20 labelled images.
Fashion-MNIST CNNs: calibration images from the training set, labelled accuracy on the 10k test set.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import assets, metrics, models, report  # noqa: E402

SECTION = "## PyTorch post-training quantization (MobileNetV2 and Fashion-MNIST)"
OUT_DIR = ROOT / ".cache" / "benchmarks"
MCT_PY = ROOT / ".venv-mct" / "bin" / "python"
MCT_LABELS = {"default": "default", "w4": "4-bit kernels", "mp": "mixed precision", "gptq": "GPTQ"}
FASHION = ("plain_cnn", "mobile_cnn")


def seed_everything(seed: int) -> None:
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)


def load_data(name: str, n_calib: int, n_eval: int, seed: int) -> dict:
    """calib / eval inputs, optional labels, and extra labelled sets, identical for every tool."""
    if name == "mobilenet_v2":
        calib, evals = assets.calibration_and_eval_sets(n_calib, n_eval, seed)
        lab_x, lab_y = assets.imagenet_labelled()
        return {"calib": calib, "eval": evals, "eval_y": None, "extra": {"labelled": lab_x}, "extra_y": {"labelled": lab_y}}
    train_x, _, test_x, test_y = assets.fashion_mnist()
    idx = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(seed))[:n_calib]
    return {"calib": train_x[idx].clone(), "eval": test_x, "eval_y": test_y, "extra": {}, "extra_y": {}}


def load_model(name: str) -> torch.nn.Module:
    return models.mobilenet_v2_pretrained() if name == "mobilenet_v2" else models.trained_fashion_model(name)


def run_ours(model, data, batch, seed) -> dict:
    """hwquant's PTQ, called exactly as a user would (MCT-compatible API)."""
    try:
        available = importlib.util.find_spec("hwquant.ptq") is not None
    except ModuleNotFoundError:  # hwquant itself not installed in this interpreter
        available = False
    if not available:
        return {"skipped": "hwquant.ptq not available yet"}
    import hwquant as mct
    calib = data["calib"]

    def rep_gen():
        for i in range(0, len(calib), batch):
            yield [calib[i:i + batch]]

    model = copy.deepcopy(model)  # our PTQ must not alter the float reference (outside the timing)
    seed_everything(seed)
    timing = {}
    with metrics.timed(timing):
        qmodel, _info = mct.ptq.pytorch_post_training_quantization(model, rep_gen)
    qmodel.eval()
    return {"tool": "hwquant (ours)", "ptq_seconds": timing["seconds"],
            "eval_logits": metrics.predict(qmodel, data["eval"], 64).float(),
            "extra_logits": {k: metrics.predict(qmodel, v, 64).float() for k, v in data["extra"].items()}}


def run_mct(name, data_file, variant, log_dir, *, batch=32, seed=0, weights_ratio=0.75, gptq_epochs=5,
            kernel_bits=None, timeout=None, gptq_hessian=True, tpc_version="1.0", export=None) -> dict:
    """MCT 2.6.1 in its own venv (benchmarks/peer_mct.py) on the saved data: its result (tool, ptq_seconds,
    eval_logits, ...) or {"error": ...}; its output goes to a log file under ``log_dir``. ``export``: a path
    MCT also writes its default export (MCTQ ONNX) to."""
    if not MCT_PY.exists():
        return {"skipped": "no .venv-mct (run benchmarks/setup_peers.sh)"}
    out = Path(tempfile.mkstemp(suffix=".pt", prefix="mct_out_")[1])
    cmd = [str(MCT_PY), str(ROOT / "benchmarks" / "peer_mct.py"), "--model", name, "--data", str(data_file),
           "--out", str(out), "--variant", variant, "--batch", str(batch), "--seed", str(seed),
           "--weights-ratio", str(weights_ratio), "--gptq-epochs", str(gptq_epochs)]
    if kernel_bits is not None:
        cmd += ["--kernel-bits", str(kernel_bits)]
    if not gptq_hessian:
        cmd += ["--gptq-no-hessian"]
    cmd += ["--tpc-version", tpc_version] + (["--export", str(export)] if export else [])
    log = log_dir / (f"mct_{name}_{variant}{'' if kernel_bits is None else f'_w{kernel_bits}'}"
                     f"{'' if gptq_hessian else '_no_hessian'}{'' if tpc_version == '1.0' else f'_tpc{tpc_version}'}.log")
    try:
        with open(log, "w") as f:  # MCT is chatty (progress bars): keep its output in a log file
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout)
        if proc.returncode != 0:
            tail = log.read_text().strip().splitlines()[-1:] or ["?"]
            return {"error": f"MCT exited {proc.returncode}: {tail[0][:200]} (log: {log.relative_to(ROOT)})", "log": str(log)}
        res = torch.load(out, weights_only=True)
    except subprocess.TimeoutExpired:
        return {"error": f"MCT not finished after {timeout} s (log: {log.relative_to(ROOT)})", "log": str(log)}
    finally:
        out.unlink(missing_ok=True)
    label = {"mp": f"mixed precision, {weights_ratio:.0%} of 8-bit weights",
             "gptq": f"GPTQ, {gptq_epochs} epochs{'' if gptq_hessian else ', no Hessian'}"}.get(variant, MCT_LABELS[variant])
    res["tool"] = f"{res['tool']} ({label})"
    return res


def _mem_available_gib() -> float:
    with open("/proc/meminfo") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("MemAvailable")) / 2**20


def ort_chunk(arg: str) -> int | None:
    """Batches per ORT calibration step; None = one pass (ORT's default, ~13 GB for MobileNetV2)."""
    if arg == "auto":  # one pass when it comfortably fits, else one batch at a time (~3 GB)
        return None if _mem_available_gib() >= 16 else 1
    return None if arg == "all" else int(arg)


def run_ort(model, data, methods, batch, chunk) -> list[dict]:
    try:
        from benchmarks.peer_ort import run_ort as _run
    except ImportError as e:
        return [{"skipped": f"onnxruntime missing ({e}); run scripts/fetch_assets.sh"}]
    return list(_run(model, data["calib"], data["eval"], data["extra"], methods, batch, chunk=chunk).values())


def score(res: dict, float_res: dict, data: dict) -> dict:
    """Metrics of one tool's outputs against the float model (and labels where there are any)."""
    f, q = float_res["eval_logits"], res["eval_logits"]
    row = {"tool": res["tool"], "seconds": res.get("ptq_seconds"),
           "agreement": metrics.top1_agreement(f, q), "sqnr_db": metrics.sqnr_db(f, q)}
    if data["eval_y"] is not None:
        row["accuracy"] = metrics.labelled_top1(q, data["eval_y"]) / len(q)
    for k, y in data["extra_y"].items():
        row[f"{k}_top1"] = metrics.labelled_top1(res["extra_logits"][k], y)
        row[f"{k}_n"] = len(y)
    return row


def benchmark_model(name: str, args, log_dir: Path) -> tuple[list[dict], list[str]]:
    print(f"== {name}", flush=True)
    torch.set_num_threads(args.threads)
    model = load_model(name)
    data = load_data(name, args.n_calib, args.n_eval, args.seed)
    float_res = {"tool": "float", "ptq_seconds": None, "eval_logits": metrics.predict(model, data["eval"], 64),
                 "extra_logits": {k: metrics.predict(model, v, 64) for k, v in data["extra"].items()}}
    results, notes = [float_res], []

    def add(res, label, total=None):
        if "skipped" in res or "error" in res:
            outcome = "skipped" if "skipped" in res else "failed"
            notes.append(f"{name}: {label} {outcome}: {res.get('skipped') or res.get('error')}")
            print("  " + notes[-1], flush=True)
        else:
            results.append(res)
            extra = f" ({total:.1f} s with start-up and evaluation)" if total is not None else ""
            print(f"  {res['tool']}: quantization {res['ptq_seconds']:.1f} s{extra}", flush=True)

    if "ours" in args.tools:
        t0 = time.perf_counter()
        try:
            res = run_ours(model, data, args.batch, args.seed)
        except Exception as e:  # keep the peer columns even when our PTQ breaks; --strict re-raises
            if args.strict:
                raise
            res = {"error": f"{type(e).__name__}: {e}"}
        add(res, "hwquant (ours)", time.perf_counter() - t0)
    if "mct" in args.tools:
        with tempfile.TemporaryDirectory(prefix="hwquant_bench_") as tmp:
            data_file = Path(tmp) / "data.pt"
            torch.save({"calib": data["calib"], "eval": data["eval"], "extra": data["extra"]}, data_file)
            for v in args.mct_variants:
                t0 = time.perf_counter()
                res = run_mct(name, data_file, v, log_dir, batch=args.batch, seed=args.seed,
                              weights_ratio=args.mct_weights_ratio, gptq_epochs=args.mct_gptq_epochs)
                add(res, f"MCT ({MCT_LABELS[v]})", time.perf_counter() - t0)
    if "ort" in args.tools:
        seed_everything(args.seed)
        t0 = time.perf_counter()
        chunk = ort_chunk(args.ort_chunk)
        ort_results = run_ort(model, data, args.ort_methods, args.batch, chunk)  # one export for all methods
        for res in ort_results:
            add(res, "ONNX Runtime")
        if "Entropy" in args.ort_methods and chunk is None:
            notes.append("ONNX Runtime's Entropy equals MinMax here: quantize_static builds 128-bin "
                         "histograms for 128 quantized bins (not settable through its extra_options), so the KL "
                         "search has a single candidate, the full range, when calibrating in one pass.")
        if chunk is not None:
            notes.append(f"{name}: ONNX Runtime calibrated {chunk} batch(es) per step (CalibStridedMinMax) "
                         "to save memory, not in one pass as by default; slower, slightly different ranges.")
        print(f"  ONNX Runtime, all methods: {time.perf_counter() - t0:.1f} s with export and evaluation", flush=True)
    return [score(r, float_res, data) for r in results], notes


# ----------------------------------------------------------------------------------- reporting
def _fmt(v, spec, suffix=""):
    return "–" if v is None else f"{v:{spec}}{suffix}"


def _vs_mct(rows):
    """Reference row for ratios/differences: MCT's default PTQ on the same model."""
    return next((r for r in rows if r["tool"].startswith("MCT") and r["tool"].endswith("(default)")), None)


def mobilenet_table(rows) -> list[str]:
    ref = _vs_mct(rows)
    out = ["| tool | quantization time (s) | time vs MCT | top-1 agreement | vs MCT (pp) | SQNR (dB) | vs MCT (dB) "
           "| labelled top-1 |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        is_float = r["tool"] == "float"
        t_ratio = r["seconds"] / ref["seconds"] if ref and r["seconds"] else None
        d_agree = 100 * (r["agreement"] - ref["agreement"]) if ref and not is_float else None
        d_sqnr = r["sqnr_db"] - ref["sqnr_db"] if ref and not is_float else None
        out.append(f"| {r['tool']} | {_fmt(r['seconds'], '.1f')} | {_fmt(t_ratio, '.2f', '×')} | "
                   f"{100 * r['agreement']:.1f}% | {_fmt(d_agree, '+.1f')} | "
                   f"{'–' if is_float else _fmt(r['sqnr_db'], '.1f')} | {_fmt(d_sqnr, '+.1f')} | "
                   f"{r['labelled_top1']}/{r['labelled_n']} |")
    return out


def fashion_table(per_model: dict) -> list[str]:
    out = ["| model | tool | quantization time (s) | time vs MCT | test accuracy | vs float (pp) | vs MCT (pp) "
           "| top-1 agreement | SQNR (dB) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in per_model.items():
        ref, flt = _vs_mct(rows), rows[0]
        for r in rows:
            is_float = r["tool"] == "float"
            t_ratio = r["seconds"] / ref["seconds"] if ref and r["seconds"] else None
            d_float = None if is_float else 100 * (r["accuracy"] - flt["accuracy"])
            d_mct = 100 * (r["accuracy"] - ref["accuracy"]) if ref and not is_float else None
            out.append(f"| {name} | {r['tool']} | {_fmt(r['seconds'], '.1f')} | {_fmt(t_ratio, '.2f', '×')} | "
                       f"{100 * r['accuracy']:.2f}% | {_fmt(d_float, '+.2f')} | {_fmt(d_mct, '+.2f')} | "
                       f"{100 * r['agreement']:.2f}% | {'–' if is_float else _fmt(r['sqnr_db'], '.1f')} |")
    return out


def machine_info() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.processor())
    return (f"{datetime.date.today().isoformat()}, {os.cpu_count()} cores ({cpu}), torch {torch.__version__}, "
            f"Python {platform.python_version()}, {torch.get_num_threads()} torch threads per tool, "
            f"1-min load average {os.getloadavg()[0]:.1f} at start")


def render(results: dict, notes: list[str], args, info: str) -> str:
    lines = [SECTION, "",
             f"Measured {info}. Reproduce: `.venv/bin/python benchmarks/run_ptq.py` (after `scripts/setup.sh`, "
             "`scripts/fetch_assets.sh`, `benchmarks/setup_peers.sh`). Every tool gets the same calibration "
             f"data in batches of {args.batch} and the same evaluation data; times are the quantization call only "
             "(MCT: `pytorch_post_training_quantization`; ONNX Runtime: `quantize_static` incl. its calibration, "
             "QDQ int8 per-channel on the ONNX export). \"vs MCT\" compares with MCT 2.6.1's default PTQ on the same "
             "model: time ratio (below 1 is faster) and differences in points/dB (positive is better).", ""]
    if "mobilenet_v2" in results:
        lines += [f"### MobileNetV2 (torchvision ImageNet weights), W8A8: {args.n_calib} calibration crops, "
                  f"{args.n_eval} evaluation crops", "",
                  "Crops are random-resized crops of disjoint sets of real photographs (opencv-doc, scikit-image); "
                  "agreement and SQNR are against the float model's logits; labelled top-1 is on the 20 labelled "
                  "ImageNet images shipped with foolbox.", ""]
        lines += mobilenet_table(results["mobilenet_v2"]) + [""]
    fm = {k: v for k, v in results.items() if k in FASHION}
    if fm:
        lines += [f"### Fashion-MNIST CNNs: {args.n_calib} calibration images (training set), 10,000 test images", "",
                  "`plain_cnn`: conv-BN-ReLU ×3 with pooling and a linear head; `mobile_cnn`: depthwise-separable "
                  "inverted residual blocks (BN, ReLU6, residual adds). Both trained here for 2 epochs, deterministically "
                  "(benchmarks/models.py).", ""]
        lines += fashion_table(fm) + [""]
    if notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace only this benchmark's section of docs/BENCHMARKS.md (benchmarks/report.py)."""
    report.replace_section(SECTION[len("## "):], text[len(SECTION):])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["mobilenet_v2", *FASHION], choices=["mobilenet_v2", *FASHION])
    ap.add_argument("--tools", nargs="+", default=["ours", "mct", "ort"], choices=["ours", "mct", "ort"])
    ap.add_argument("--mct-variants", nargs="+", default=["default"], choices=list(MCT_LABELS))
    ap.add_argument("--mct-weights-ratio", type=float, default=0.75, help="mixed precision target (mp variant)")
    ap.add_argument("--mct-gptq-epochs", type=int, default=5)
    ap.add_argument("--ort-methods", nargs="+", default=["MinMax", "Entropy", "Percentile"],
                    choices=["MinMax", "Entropy", "Percentile"])
    ap.add_argument("--ort-chunk", default="auto",
                    help="ORT calibration batches per step: 'all' (ORT default, one pass), N, or 'auto' "
                         "(one pass if >= 16 GiB is available, else 1)")
    ap.add_argument("--n-calib", type=int, default=192)
    ap.add_argument("--n-eval", type=int, default=490, help="MobileNetV2 evaluation crops")
    ap.add_argument("--batch", type=int, default=32, help="calibration batch size, all tools")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--strict", action="store_true", help="re-raise errors from our PTQ instead of noting them")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    info = machine_info()
    log_dir = report.log_dir()
    results, notes = {}, []
    for name in args.models:
        rows, n = benchmark_model(name, args, log_dir)
        results[name] = rows
        notes += [x for x in n if x not in notes]  # model-independent notes once
    # Other work on the machine inflates wall times: say how busy it was.
    info += f" and {os.getloadavg()[0]:.1f} at end"
    text = render(results, notes, args, info)
    print("\n" + text)
    (OUT_DIR / "run_ptq.json").write_text(json.dumps({"info": info, "results": results, "notes": notes}, indent=1))
    if not args.no_write:
        write_section(text)
        print("wrote docs/BENCHMARKS.md")


if __name__ == "__main__":
    main()
