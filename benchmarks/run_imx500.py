"""IMX500 converter benchmark: hwquant's and MCT 2.6.1's MCTQ ONNX exports of the same models, each
converted by Sony's real IMX500 compiler (imxconv-pt 3.19.2), side by side in one run.

    bash benchmarks/setup_imx500.sh && bash benchmarks/setup_peers.sh
    .venv/bin/python benchmarks/run_imx500.py            # writes its section of docs/BENCHMARKS.md
    .venv/bin/python benchmarks/run_imx500.py --no-write --cases mnv2_1.0 tiny_vit

Cases: MobileNetV2 (real ImageNet weights) with the IMX500 TPC 1.0, 4.0 and 5.0, and with mixed
precision at 75 % of each tool's own 8-bit weights memory; small nets with residual adds and
concatenation, hard-swish and squeeze-excite, and a small vision transformer (LayerNorm, softmax
attention, GELU). Both tools quantize the same calibration data with their default settings and
export with their default MCTQ export. Reported: whether the converter accepts the file (else its
first error), the conversion time, the converter's memory report (memory usage, utilization, fits in
chip), each tool's quantize-and-export time, and the simulated model's output SQNR against float.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import assets, edge_nets, metrics, models, report  # noqa: E402
from benchmarks.run_ptq import run_mct, seed_everything  # noqa: E402

SECTION = "IMX500 converter: acceptance and memory report (MCTQ exports)"
IMXCONV = ROOT / ".venv-imx" / "bin" / "imxconv-pt"
# key: (label, model, TPC version, weights-memory ratio for mixed precision or None)
CASES = {
    "mnv2_1.0": ("MobileNetV2", "mobilenet_v2", "1.0", None),
    "mnv2_4.0": ("MobileNetV2", "mobilenet_v2", "4.0", None),
    "mnv2_5.0": ("MobileNetV2", "mobilenet_v2", "5.0", None),
    "mnv2_mp75": ("MobileNetV2, mixed precision 75 % weights", "mobilenet_v2", "1.0", 0.75),
    "concat_residual": ("concat + residual net", "concat_residual_net", "1.0", None),
    "hswish_se": ("hard-swish + squeeze-excite net", "hswish_se_net", "1.0", None),
    "tiny_vit": ("tiny ViT (LayerNorm, attention, GELU)", "tiny_vit", "4.0", None),
    "tiny_vit_static": ("tiny ViT, constant token count", "tiny_vit_static", "4.0", None),
}


def model_and_data(name: str, n_calib: int, n_eval: int):
    """The float model, its calibration and evaluation inputs (crops of disjoint natural photos)."""
    calib, evals = assets.calibration_and_eval_sets(n_calib, n_eval, 0)
    if name == "mobilenet_v2":
        return models.mobilenet_v2_pretrained().eval(), calib, evals
    size = edge_nets.EDGE_NETS[name][1][1:]
    resize = lambda x: F.interpolate(x, size=size, mode="bilinear", antialias=True)  # noqa: E731
    return edge_nets.build_edge_net(name), resize(calib), resize(evals)


def run_ours(model, calib, version: str, ratio, path: Path) -> dict:
    import hwquant as mct

    def rep_gen():
        for i in range(0, len(calib), 32):
            yield [calib[i:i + 32]]

    tpc = mct.get_target_platform_capabilities(version, "imx500")
    t0 = time.perf_counter()
    kwargs = {}
    if ratio is not None:
        full = mct.core.pytorch_resource_utilization_data(model, rep_gen, target_platform_capabilities=tpc)
        kwargs["target_resource_utilization"] = mct.core.ResourceUtilization(weights_memory=ratio * full.weights_memory)
    qmodel, _ = mct.ptq.pytorch_post_training_quantization(model, rep_gen, target_platform_capabilities=tpc, **kwargs)
    mct.exporter.pytorch_export_model(qmodel, path, rep_gen)
    return {"seconds": time.perf_counter() - t0, "qmodel": qmodel}


def convert(path: Path, log_dir: Path, timeout: int) -> dict:
    """Run imxconv-pt on `path`: accepted or not, seconds, its memory report or first error."""
    out_dir = Path(tempfile.mkdtemp(prefix="imxconv_")) / "out"  # the converter wants a new folder
    log = log_dir / f"imxconv_{path.stem}.log"
    t0 = time.perf_counter()
    try:
        with open(log, "w") as f:
            proc = subprocess.run([str(IMXCONV), "-i", str(path), "-o", str(out_dir)], stdout=f,
                                  stderr=subprocess.STDOUT, timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = None
    seconds = time.perf_counter() - t0
    reports = list(out_dir.glob("*MemoryReport.json"))
    if rc == 0 and reports:
        mem = json.loads(reports[0].read_text())["Memory Report"]
        return {"accepted": True, "seconds": seconds, "usage": mem["Memory Usage"],
                "utilization": mem["Memory Utilization"], "fits": mem["Fit In Chip"]}
    text = log.read_text()
    errors = [ln.split("CODE:", 1)[1].strip() for ln in text.splitlines() if "ERROR" in ln and "CODE:" in ln]
    why = errors[0][:90] if errors else ("timed out" if rc is None else f"exit code {rc}")
    reasons = [ln.split("reason:", 1)[1].split(" [/")[0].strip() for ln in text.splitlines() if "reason:" in ln]
    if reasons:
        why += f" ({len(reasons)} inputs; first: {reasons[0]})"
    return {"accepted": False, "seconds": seconds, "error": why[:240].replace("|", "/"),
            "log": str(log.relative_to(ROOT))}


def row(label, version, tool, quant_s, conv, sqnr) -> str:
    if conv.get("accepted"):
        verdict, mem = "**accepted**", f"{conv['usage']} ({conv['utilization']}), fits: {conv['fits']}"
    else:
        verdict, mem = f"refused: {conv.get('error', '?')}", "-"
    q = f"{quant_s:.1f}" if quant_s is not None else "-"
    s = f"{sqnr:.1f}" if sqnr is not None else "-"
    return f"| {label} | {version} | {tool} | {q} | {verdict} | {conv.get('seconds', 0):.0f} | {mem} | {s} |"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per conversion and per MCT run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    if not IMXCONV.exists():
        sys.exit("no IMX500 converter: run bash benchmarks/setup_imx500.sh first")
    torch.set_num_threads(args.threads)
    log_dir = report.log_dir()
    work = Path(tempfile.mkdtemp(prefix="hwquant_imx500_bench_"))
    rows = []
    for key in args.cases:
        label, name, version, ratio = CASES[key]
        seed_everything(0)
        model, calib, evals = model_and_data(name, args.calib, args.eval)
        float_out = metrics.predict(model, evals, 64)
        data_file = work / f"{key}_data.pt"
        torch.save({"calib": calib, "eval": evals}, data_file)

        ours_path = work / f"hwquant_{key}.onnx"
        ours = run_ours(model, calib, version, ratio, ours_path)
        ours_sqnr = metrics.sqnr_db(float_out, metrics.predict(ours["qmodel"], evals, 64))
        rows.append(row(label, version, "hwquant", ours["seconds"], convert(ours_path, log_dir, args.timeout),
                        ours_sqnr))
        print(rows[-1], flush=True)

        mct_path = work / f"mct_{key}.onnx"
        res = run_mct(name, data_file, "mp" if ratio else "default", log_dir, weights_ratio=ratio or 0.75,
                      tpc_version=version, export=mct_path, timeout=args.timeout)
        if "error" in res or "skipped" in res:
            conv = {"accepted": False, "seconds": 0, "error": f"no file: {res.get('error') or res.get('skipped')}"}
            rows.append(row(label, version, "MCT 2.6.1", None, conv, None))
        else:
            mct_s = res["ptq_seconds"] + res.get("export_seconds", 0) + res.get("ru_data_seconds", 0)
            rows.append(row(label, version, "MCT 2.6.1", mct_s, convert(mct_path, log_dir, args.timeout),
                            metrics.sqnr_db(float_out, res["eval_logits"])))
        print(rows[-1], flush=True)

    body = (f"Measured {datetime.date.today()} on {platform.machine()} CPU ({args.threads} threads), by "
            "`benchmarks/run_imx500.py`: each tool quantizes the same calibration crops "
            f"({args.calib}, of photos disjoint from the {args.eval} evaluation crops) with its defaults and the "
            "TPC shown, exports with its default MCTQ ONNX export, and Sony's IMX500 converter (imxconv-pt "
            "3.19.2, uni-pytorch 3.19.0, sdspconv 3.19.1, `benchmarks/setup_imx500.sh`) converts the file. "
            "Quantize s: quantization and export (mixed precision: with the resource measurement the target "
            "is taken from). Memory: the converter's report (memory usage, utilization of the 8 MB on chip, "
            "fits in chip). SQNR: the simulated quantized model's outputs against float on the evaluation "
            "crops. Small nets: seeded weights (the converter's verdict and memory depend on the "
            "architecture and bit widths).\n\n"
            "| model | TPC | tool | quantize s | converter | conversion s | memory (utilization), fits | SQNR dB |\n"
            "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            "hwquant writes its MCTQ file in the forms the converter accepts (`torch/deployment/imx500_forms.py`): linear "
            "layers on token sequences run on a 4-D (N, 1, T, D) view, products of two activations (attention) "
            "run head by head as quantized 3-D products, and GELU is exported at opset 20 as one Gelu operator "
            "(below opset 20 torch writes Erf, which the chip lacks). Each form computes the simulated model's "
            "function. The edge-mdt-tpc TPC versions are not in the table: hwquant does not load them yet "
            "(issue 16). MCT 2.6.1's export calls torch.onnx.export as written for torch < 2.9; with torch 2.13's "
            "default (dynamo) exporter it fails, so its peer runs it with the TorchScript exporter (dynamo=False), "
            "the default MCT was written for.")
    report.publish(SECTION, body, write=not args.no_write)


if __name__ == "__main__":
    main()
