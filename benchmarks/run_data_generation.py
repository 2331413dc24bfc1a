"""Data-free quantization benchmark: hwquant's generated images against MCT 2.6.1's and against real images, in
one run, same models, image count, iterations and batch size.

    .venv/bin/python benchmarks/run_data_generation.py                 # writes its section of docs/BENCHMARKS.md
    .venv/bin/python benchmarks/run_data_generation.py --no-write --models mobile_cnn --n-iter 20

Per model, each tool generates ``--n-images`` images in its own process (this script with ``--tool``; MCT in
.venv-mct) with MCT's PyTorch defaults except the iteration count and the batch size, which both tools get the
same (MCT's defaults, 1500 iterations over batches of 256, would take hours on 2 cores): generation time per image
and the process's peak memory. Then each calibration set (real images, hwquant's, MCT's; the same count) calibrates
hwquant's PTQ at W8A8 and W4A8 and its GPTQ at W4A8, so the data alone differs. MobileNetV2 (torchvision weights):
top-1 agreement and output SQNR against the float model on held-out crops, labelled top-1 on the 20 labelled
ImageNet images; Fashion-MNIST CNNs: labelled accuracy on the 10k test images and agreement with the float model.
The Fashion CNNs take standardised single-channel images: NO_NORMALIZATION, no clipping, 4 extra pixels."""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTION = "Data-free quantization"
OUT = ROOT / ".cache" / "benchmarks" / "data_generation.json"
WORK = ROOT / ".cache" / "benchmarks" / "data_generation"
MODELS = ["mobilenet_v2", "mobile_cnn", "plain_cnn"]
SCHEMES = [("W8A8 PTQ", 8, False), ("W4A8 PTQ", 4, False), ("W4A8 GPTQ", 4, True)]


def generation_settings(name: str) -> dict:
    if name == "mobilenet_v2":
        return {"size": 224, "extra_pixels": 32, "normalization": "TORCHVISION", "clipping": True}
    return {"size": 28, "extra_pixels": 4, "normalization": "NO_NORMALIZATION", "clipping": False}


def generate_in_this_process(tool: str, name: str, n_images: int, n_iter: int, batch: int, out: Path) -> None:
    """``--tool``: one tool's generation, images to ``out`` (.npy), figures beside it (.json)."""
    if tool == "mct":
        from benchmarks.peer_mct import build_model, import_mct
        lib = import_mct()
    else:
        import hwquant as lib
        from benchmarks.peer_mct import build_model
    dg = lib.data_generation
    model = build_model(name).eval()
    s = generation_settings(name)
    config = dg.get_pytorch_data_generation_config(
        n_iter=n_iter, data_gen_batch_size=batch, extra_pixels=s["extra_pixels"], image_clipping=s["clipping"],
        image_normalization_type=dg.ImageNormalizationType[s["normalization"]])
    torch.manual_seed(0)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    images = dg.pytorch_data_generation_experimental(model, n_images, s["size"], config)
    seconds = time.perf_counter() - start
    array = torch.cat([i.detach().cpu() for i in images]).numpy()
    np.save(out, array)
    out.with_suffix(".json").write_text(json.dumps({
        "seconds": seconds, "seconds_per_image": seconds / n_images, "images": len(images),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024,
        "finite": bool(np.isfinite(array).all())}))


def generate(tool: str, name: str, n_images: int, n_iter: int, batch: int) -> dict:
    WORK.mkdir(parents=True, exist_ok=True)
    out = WORK / f"{name}_{tool}.npy"
    python = ROOT / (".venv-mct" if tool == "mct" else ".venv") / "bin" / "python"
    cmd = [str(python), __file__, "--tool", tool, "--models", name, "--n-images", str(n_images), "--n-iter",
           str(n_iter), "--batch", str(batch), "--out", str(out)]
    log = WORK / f"{name}_{tool}.log"
    with log.open("w") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: " + log.read_text(errors="replace")[-600:]}
    return {**json.loads(out.with_suffix(".json").read_text()), "images_file": str(out)}


def quantize(model, calib: torch.Tensor, bits: int, gptq: bool, epochs: int):
    import hwquant as mct

    def rep_gen():
        for i in range(0, len(calib), 16):
            yield [calib[i:i + 16]]
    cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=bits))
    model = copy.deepcopy(model)
    torch.manual_seed(0)
    if gptq:
        cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=epochs)
        return mct.gptq.pytorch_gradient_post_training_quantization(model, rep_gen, core_config=cc, gptq_config=cfg)[0]
    return mct.ptq.pytorch_post_training_quantization(model, rep_gen, core_config=cc)[0]


def evaluate(name: str, q, data: dict, reference: torch.Tensor) -> dict:
    from benchmarks import metrics
    with torch.no_grad():
        out = metrics.predict(q.eval(), data["eval"], 64).float()
    row = {"agreement": metrics.top1_agreement(reference, out), "sqnr_db": metrics.sqnr_db(reference, out)}
    labels = data["eval_y"]
    if labels is not None:
        row["accuracy"] = metrics.labelled_top1(out[:len(labels)], labels) / len(labels)
    return row


def load(name: str, n_images: int, n_eval: int) -> tuple:
    from benchmarks import assets, models
    from benchmarks.run_ptq import load_data
    if name == "mobilenet_v2":
        calib, evals, labels = assets.all_photos_and_imagenet_sets(n_images, n_eval, 0)
        data = {"calib": calib, "eval": evals, "eval_y": labels}
        model = models.mobilenet_v2_pretrained()
    else:
        data = load_data(name, n_images, 0, 0)
        model = models.trained_fashion_model(name)
    return model.eval(), data


def run_model(name: str, args) -> dict:
    from benchmarks import metrics
    model, data = load(name, args.n_images, args.n_eval)
    with torch.no_grad():
        reference = metrics.predict(model, data["eval"], 64).float()
    result = {"model": name, "n_images": args.n_images, "n_iter": args.n_iter, "batch": args.batch,
              "float": evaluate(name, model, data, reference), "generation": {}, "rows": []}
    sets = {"real": data["calib"]}
    for tool in ("hwquant", "mct"):
        gen = generate(tool, name, args.n_images, args.n_iter, args.batch)
        result["generation"][tool] = gen
        print(name, tool, {k: v for k, v in gen.items() if k != "images_file"}, flush=True)
        if "error" not in gen:
            sets[tool] = torch.from_numpy(np.load(gen["images_file"]))
    for scheme, bits, gptq in SCHEMES:
        if gptq and args.no_gptq:
            continue
        for source, calib in sets.items():
            start = time.perf_counter()
            try:
                q = quantize(model, calib, bits, gptq, args.gptq_epochs)
                row = {"scheme": scheme, "data": source, **evaluate(name, q, data, reference),
                       "quantize_seconds": time.perf_counter() - start}
            except Exception as e:  # (said in the table)
                row = {"scheme": scheme, "data": source, "error": f"{type(e).__name__}: {e}"[:300]}
            print(name, row, flush=True)
            result["rows"].append(row)
    return result


def render(results: list) -> str:
    lines = ["Calibration without data (issue 32): images generated from the float model alone (batch-norm "
             "statistics, output loss, smoothing and augmentation) by hwquant and by MCT 2.6.1, each in its own "
             "process with MCT's PyTorch defaults except the iteration count and batch size, which both get the "
             "same; then hwquant's PTQ / GPTQ calibrated on real images, on hwquant's and on MCT's generated images "
             "(the same count), so the data alone differs. `benchmarks/run_data_generation.py`; 2 CPU cores. "
             "MobileNetV2: agreement / SQNR against the float model on held-out crops and labelled top-1 on the 20 "
             "labelled ImageNet images; Fashion CNNs: labelled test accuracy (10k) and agreement.", ""]
    for r in results:
        gen = r["generation"]
        lines.append(f"**{r['model']}** ({r['n_images']} images, {r['n_iter']} iterations, batches of "
                     f"{r['batch']}; float: " + ", ".join(_fmt(k, v) for k, v in r["float"].items()) + ")")
        lines.append("")
        lines.append("| generation | seconds per image | peak process memory | ratio MCT / hwquant (time) |")
        lines.append("|---|---|---|---|")
        ratio = (gen["mct"]["seconds"] / gen["hwquant"]["seconds"]
                 if all("seconds" in gen.get(t, {}) for t in ("mct", "hwquant")) else None)
        for tool in ("hwquant", "mct"):
            g = gen.get(tool, {})
            if "error" in g or not g:
                lines.append(f"| {tool} | failed: {g.get('error', 'not run')[:200]} | | |")
                continue
            lines.append(f"| {tool} | {g['seconds_per_image']:.2f} | {g['peak_rss_mb']:.0f} MB | "
                         f"{f'{ratio:.2f}x' if tool == 'hwquant' and ratio else ''} |")
        lines.append("")
        keys = [k for k in ("agreement", "sqnr_db", "accuracy") if k in r["float"]]
        lines.append("| scheme | data | " + " | ".join(_head(k) for k in keys) + " |")
        lines.append("|---|---|" + "---|" * len(keys))
        for row in r["rows"]:
            if "error" in row:
                lines.append(f"| {row['scheme']} | {row['data']} | failed: {row['error'][:150]} |" + " |" * (len(keys) - 1))
            else:
                lines.append(f"| {row['scheme']} | {row['data']} | " + " | ".join(_fmt(k, row[k]) for k in keys) + " |")
        lines.append("")
    return "\n".join(lines)


def _head(key: str) -> str:
    return {"agreement": "agreement", "sqnr_db": "SQNR", "accuracy": "labelled top-1"}[key]


def _fmt(key: str, value: float) -> str:
    return f"{value:.1f} dB" if key == "sqnr_db" else f"{100 * value:.1f} %"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=MODELS)
    p.add_argument("--n-images", type=int, default=32)
    p.add_argument("--n-iter", type=int, default=80)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--n-eval", type=int, default=300)
    p.add_argument("--gptq-epochs", type=int, default=2)
    p.add_argument("--no-gptq", action="store_true")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--tool", choices=["hwquant", "mct"], help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tool:
        generate_in_this_process(args.tool, args.models[0], args.n_images, args.n_iter, args.batch, args.out)
        return
    from benchmarks import report
    if args.render_only:
        results = json.loads(OUT.read_text())["results"]
    else:
        previous = {r["model"]: r for r in json.loads(OUT.read_text())["results"]} if OUT.exists() else {}
        for name in args.models:
            previous[name] = run_model(name, args)
            OUT.parent.mkdir(parents=True, exist_ok=True)
            OUT.write_text(json.dumps({"date": datetime.date.today().isoformat(),
                                       "results": [previous[m] for m in MODELS if m in previous]}, indent=1))
        results = [previous[m] for m in MODELS if m in previous]
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / "data_generation.json").write_text(OUT.read_text())
    report.publish(SECTION, render(results), write=not args.no_write)


if __name__ == "__main__":
    main()
