"""Mixed-precision benchmark: MobileNetV2 (real weights) under resource targets, hwquant against
MCT 2.6.1's mixed precision on the same data, one after the other.

    .venv/bin/python benchmarks/run_mixed_precision.py          # writes its section of docs/BENCHMARKS.md
    .venv/bin/python benchmarks/run_mixed_precision.py --no-write --cases w75

Cases: weights memory at 75 % and 50 % of the 8-bit weights memory (IMX500 1.0: kernels 8/4/2 bits),
and activation memory at 90 % of the largest activation memory (IMX500 4.0: activations 8 or 16
bits), each tool's target taken from its own resource figures. Reported: fidelity against the
float model (top-1 agreement, output SQNR, labelled top-1), the figures reached, and wall time of
the quantization call.
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import metrics, report  # noqa: E402
from benchmarks.run_ptq import MCT_PY, load_data, load_model, seed_everything  # noqa: E402

SECTION = "Mixed precision (MobileNetV2)"
# ratios of each tool's resource-utilization data, which (MCT's definition) is the single-precision
# model: 8-bit kernels, and 8-bit activations also on IMX500 4.0, whose 16-bit options a target above
# 1.0 lets mixed precision spend where they help most
CASES = {"w75": ("weights", 0.75, "1.0"), "w50": ("weights", 0.5, "1.0"), "a150": ("activation", 1.5, "4.0")}


def run_ours(model, data, kind, ratio, version, batch=32):
    import hwquant as mct
    calib = data["calib"]

    def rep_gen():
        for i in range(0, len(calib), batch):
            yield [calib[i:i + batch]]

    tpc = mct.get_target_platform_capabilities(version, "imx500")
    seed_everything(0)
    ru = mct.core.pytorch_resource_utilization_data(model, rep_gen, target_platform_capabilities=tpc)
    target = mct.core.ResourceUtilization(**{f"{kind}_memory": getattr(ru, f"{kind}_memory") * ratio})
    t0 = time.perf_counter()
    q, info = mct.ptq.pytorch_post_training_quantization(model, rep_gen, target_resource_utilization=target,
                                                         target_platform_capabilities=tpc)
    seconds = time.perf_counter() - t0
    final = info.final_resource_utilization
    return {"tool": "hwquant (ours)", "seconds": seconds, "eval_logits": metrics.predict(q, data["eval"], 64),
            "extra_logits": {k: metrics.predict(q, v, 64) for k, v in data["extra"].items()},
            "reached": getattr(final, f"{kind}_memory") / getattr(ru, f"{kind}_memory")}


def run_mct(data, kind, ratio, version, log_dir: Path):
    if not MCT_PY.exists():
        return None
    with tempfile.TemporaryDirectory(prefix="hwquant_mp_") as tmp:
        data_file, out = Path(tmp) / "data.pt", Path(tmp) / "out.pt"
        torch.save({"calib": data["calib"], "eval": data["eval"], "extra": data["extra"]}, data_file)
        cmd = [str(MCT_PY), str(ROOT / "benchmarks" / "peer_mct.py"), "--model", "mobilenet_v2", "--data", str(data_file),
               "--out", str(out), "--variant", "mp", "--tpc-version", version,
               "--weights-ratio" if kind == "weights" else "--activation-ratio", str(ratio)]
        with open(log_dir / f"mct_mp_{kind}_{ratio}.log", "w") as f:
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        if proc.returncode != 0:
            return {"tool": "MCT 2.6.1", "error": f"exit {proc.returncode}"}
        res = torch.load(out, weights_only=True)
    full = res.get("weights_memory_8bit") if kind == "weights" else res.get("activation_memory_max")
    reached = res.get(f"final_{kind}_memory")
    return {"tool": res["tool"], "seconds": res["ptq_seconds"], "eval_logits": res["eval_logits"],
            "extra_logits": res["extra_logits"], "reached": reached / full if reached and full else None}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--no-mct", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    log_dir = report.log_dir()
    model = load_model("mobilenet_v2")
    data = load_data("mobilenet_v2", 192, 490, 0)
    f = metrics.predict(model, data["eval"], 64)
    labels = data["extra_y"]["labelled"]
    lines = [f"`benchmarks/run_mixed_precision.py`, {datetime.date.today()}, 2 threads, MobileNetV2 with real "
             "ImageNet weights, 192 calibration crops, 490 evaluation crops + 20 labelled images; each tool's target "
             "is the ratio of its own resource-utilization data (the single-precision model, as MCT defines it: 8-bit "
             "kernels, float biases not counted; 8-bit activations, so an activation target above 1.0 buys 16-bit "
             "tensors on IMX500 4.0). "
             "Time: the quantization call (MCT's includes its resource-utilization pass).", "",
             "| target | tool | time (s) | time vs MCT | reached / full | top-1 agreement | SQNR (dB) | labelled top-1 |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for case in args.cases:
        kind, ratio, version = CASES[case]
        label = f"{kind} memory {ratio:.0%} (IMX500 {version})"
        rows = [run_ours(model, data, kind, ratio, version)]
        if not args.no_mct:
            mct_row = run_mct(data, kind, ratio, version, log_dir)
            if mct_row is not None:
                rows.append(mct_row)
        mct_s = next((r["seconds"] for r in rows if r["tool"].startswith("MCT") and "error" not in r), None)
        for r in rows:
            if "error" in r:
                lines.append(f"| {label} | {r['tool']} | failed: {r['error']} | | | | | |")
                continue
            q = r["eval_logits"]
            ratio_s = f"{r['seconds'] / mct_s:.2f}x" if mct_s else "–"
            reached = f"{r['reached']:.3f}" if r.get("reached") else "–"
            lines.append(f"| {label} | {r['tool']} | {r['seconds']:.1f} | {ratio_s} | {reached} | "
                         f"{100 * metrics.top1_agreement(f, q):.1f}% | {metrics.sqnr_db(f, q):.1f} | "
                         f"{metrics.labelled_top1(r['extra_logits']['labelled'], labels)}/20 |")
            print(lines[-1], flush=True)
    lines += ["", "hwquant's sensitivities: the distance each candidate causes at the interest points, estimated "
              "on the float model with random probes through one backward pass per round (Gauss-Newton, "
              "`torch/mixed_precision.py`) instead of one forward pass per candidate; then scipy's milp and a "
              "refinement pass.",
              "", "Notes: both tools' targets are ratios of their resource-utilization data, which since session 9 "
              "means the same thing (MCT's definitions, checked figure by figure on a small net): with a weights "
              "target the activations keep their base 8 bits; the activation target (1.5x the 8-bit figure on IMX500 "
              "4.0) lets each tool choose which tensors take 16 bits, the kernels staying at 8."]
    report.publish(SECTION, "\n".join(lines), write=not args.no_write)


if __name__ == "__main__":
    main()
