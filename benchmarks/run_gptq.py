"""GPTQ benchmark: PTQ against GPTQ (ours) against MCT 2.6.1's GPTQ, same data, same epochs, same
kernel bit widths (every Conv2d / Linear kernel at --bits, 8-bit activations, IMX500 1.0 TPC
otherwise), MCT's default GPTQ configuration (get_pytorch_gptq_config(n_epochs)) for both tools.

    .venv/bin/python benchmarks/run_gptq.py --models mobile_cnn plain_cnn --bits 4 3
    .venv/bin/python benchmarks/run_gptq.py --models mobilenet_v2 --bits 4 --n-calib 64 --epochs 2 --mct-timeout 900

Fashion-MNIST CNNs: --n-calib training images, labelled accuracy on the 10k test images.
MobileNetV2: --n-calib calibration crops, --n-eval evaluation crops: top-1 agreement with float and
output SQNR. Reported: fidelity and the wall time of the whole quantization call (PTQ included).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import assets, metrics, report  # noqa: E402
from benchmarks.run_ptq import load_data, load_model, run_mct, seed_everything  # noqa: E402

SECTION = "Gradient-based post-training quantization (GPTQ)"
OUT = ROOT / ".cache" / "benchmarks" / "gptq.json"
NO_HESSIAN = {"use_hessian_based_weights": False, "use_hessian_sample_attention": False}


def ours(model, data, bits, epochs, batch, gptq: bool, seed=0, hessian=True):
    import hwquant as mct
    calib = data["calib"]

    def rep_gen():
        for i in range(0, len(calib), batch):
            yield [calib[i:i + batch]]

    cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=bits))
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=epochs, **({} if hessian else NO_HESSIAN))  # before the clock, as for MCT
    model = copy.deepcopy(model)
    seed_everything(seed)
    t0 = time.perf_counter()
    if gptq:
        q, info = mct.gptq.pytorch_gradient_post_training_quantization(model, rep_gen, core_config=cc, gptq_config=cfg)
        extra = {"hessian_seconds": info.gptq_info_dict["hessian_seconds"],
                 "training_seconds": info.gptq_info_dict["training_seconds"]}
    else:
        q, _ = mct.ptq.pytorch_post_training_quantization(model, rep_gen, core_config=cc)
        extra = {}
    seconds = time.perf_counter() - t0
    return {"tool": f"hwquant {'GPTQ' if gptq else 'PTQ'}", "seconds": seconds,
            "logits": metrics.predict(q.eval(), data["eval"], 64).float(), **extra}


def mct_gptq(name, data_file, bits, epochs, batch, timeout, log_dir, hessian=True):
    res = run_mct(name, data_file, "gptq", log_dir, batch=batch, gptq_epochs=epochs, kernel_bits=bits, timeout=timeout,
                  gptq_hessian=hessian)
    if "eval_logits" not in res:
        error = res.get("error") or res.get("skipped")
        progress = hessian_progress(Path(res["log"])) if "log" in res else ""
        return {"tool": "MCT GPTQ", "error": error + (f"; {progress}" if progress and "not finished" in error else "")}
    return {"tool": f"{res['tool'].split(' (')[0]} GPTQ", "seconds": res["ptq_seconds"], "logits": res["eval_logits"]}


def gptq_data(name, n_calib, n_eval, seed=0) -> dict:
    """Fashion-MNIST: as the PTQ benchmark. MobileNetV2: calibration crops of all the natural photos,
    evaluation on the ImageNet images (whole, then n_eval crops); labels for the whole ones."""
    if name != "mobilenet_v2":
        return load_data(name, n_calib, n_eval, seed)
    calib, evals, labels = assets.all_photos_and_imagenet_sets(n_calib, n_eval, seed)
    return {"calib": calib, "eval": evals, "eval_y": labels}


def hessian_progress(log: Path) -> str:
    """How far MCT's Hessian estimate got, from the progress bars in its log ("" if none)."""
    import re
    if not log.exists():
        return ""
    bars = re.findall(r"Hessian random iterations:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)", log.read_text(errors="replace"))
    if not bars:
        return ""
    done = sum(1 for i, (k, n) in enumerate(bars) if k == n and (i == 0 or bars[i - 1][0] != n))  # tqdm repeats lines
    k, n = bars[-1]
    return f"its Hessian estimate was at random iteration {k} of {n} of batch {done + 1}" if k != n \
        else f"its Hessian estimate had done {done} batch(es) of {n} random iterations"


def score(res, float_logits, labels):
    if "error" in res:
        return {"tool": res["tool"], "error": res["error"]}
    row = {k: v for k, v in res.items() if k != "logits"}
    row["agreement"] = metrics.top1_agreement(float_logits, res["logits"])
    row["sqnr_db"] = metrics.sqnr_db(float_logits, res["logits"])
    if labels is not None:
        row["accuracy"] = metrics.labelled_top1(res["logits"][:len(labels)], labels) / len(labels)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["mobile_cnn", "plain_cnn"])
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 3])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--n-calib", type=int, default=512)
    ap.add_argument("--n-eval", type=int, default=490)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--mct-timeout", type=int, default=1200)
    ap.add_argument("--no-hessian", action="store_true",
                    help="both tools without Hessian-based loss weights (MCT's estimate takes hours on MobileNetV2 on a CPU)")
    ap.add_argument("--no-mct", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    log_dir = report.log_dir()
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    for name in args.models:
        data = gptq_data(name, args.n_calib, args.n_eval)
        model = load_model(name).eval()
        float_logits = metrics.predict(model, data["eval"], 64).float()
        labels = data["eval_y"]
        data_file = Path(tempfile.mkstemp(suffix=".pt")[1])
        torch.save({"calib": data["calib"], "eval": data["eval"], "extra": {}}, data_file)
        for bits in args.bits:
            rows = [{"tool": "float", **({"accuracy": metrics.labelled_top1(float_logits[:len(labels)], labels) / len(labels)}
                                         if labels is not None else {})}]
            for gptq in (False, True):
                rows.append(score(ours(model, data, bits, args.epochs, args.batch, gptq, hessian=not args.no_hessian),
                                  float_logits, labels))
                print(rows[-1], flush=True)
            if not args.no_mct:
                rows.append(score(mct_gptq(name, data_file, bits, args.epochs, args.batch, args.mct_timeout, log_dir,
                                           hessian=not args.no_hessian), float_logits, labels))
                print(rows[-1], flush=True)
            key = f"{name}/w{bits}a8" + ("/no-hessian" if args.no_hessian else "")
            results[key] = {"rows": rows, "epochs": args.epochs, "n_calib": args.n_calib,
                            "hessian": not args.no_hessian, "date": time.strftime("%Y-%m-%d")}
        data_file.unlink(missing_ok=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=1))
    report.publish(SECTION, render(results), write=not args.no_write)


def render(results) -> str:
    lines = ["`benchmarks/run_gptq.py`. Both tools run MCT's default GPTQ configuration "
             "(`get_pytorch_gptq_config(n_epochs)`: soft rounding, sample-layer attention with Hessian scores, "
             "gradual activation quantization, bias training), or, in the 'no Hessian' rows, the same without "
             "Hessian weights (`use_hessian_based_weights=False, use_hessian_sample_attention=False`), on the same "
             "calibration data (batches of 32) for the same epochs; every Conv2d / Linear kernel at the given bits "
             "(hwquant: `QuantizationConfig(weights_n_bits)`, MCT: `BitWidthConfig`, with a 3-bit kernel candidate "
             "added to its IMX500 TPC for W3), 8-bit activations, IMX500 1.0 TPC. Fashion-MNIST: 512 training "
             "images, accuracy on the 10k test images. MobileNetV2: calibration crops of all 29 natural photos "
             "(opencv-doc, scikit-image), evaluated on the 20 labelled ImageNet images (foolbox) and 490 random "
             "crops of them: top-1 agreement with float and output SQNR over all 510, 'accuracy' = top-1 on the "
             "20 whole images. Time: the whole call (PTQ included), 2-core CPU, the tools one after another; "
             "'vs MCT': our GPTQ's time over MCT's.", "",
             "| model | weights | data, epochs | tool | accuracy | agreement | SQNR (dB) | time (s) | vs MCT |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, r in sorted(results.items()):
        name, bits = key.split("/")[:2]
        mct_seconds = next((row.get("seconds") for row in r["rows"] if row["tool"].startswith("MCT")), None)
        for row in r["rows"]:
            if "error" in row:
                cells = [row["error"], "", "", "", ""]
            else:
                ratio = row.get("seconds") / mct_seconds if row["tool"] == "hwquant GPTQ" and mct_seconds \
                    and row.get("seconds") else None
                cells = [f"{100 * row['accuracy']:.2f} %" if "accuracy" in row else "",
                         f"{100 * row['agreement']:.1f} %" if "agreement" in row else "",
                         f"{row['sqnr_db']:.1f}" if "sqnr_db" in row else "",
                         f"{row['seconds']:.1f}" if row.get("seconds") is not None else "",
                         f"{ratio:.2f}" if ratio is not None else ""]
            setting = f"{r['n_calib']}, {r['epochs']}" + ("" if r.get("hessian", True) else ", no Hessian")
            lines.append(f"| {name} | {bits.upper()} | {setting} | {row['tool']} | "
                         + " | ".join(cells) + " |")
    lines += ["", "Our GPTQ trains from the float biases and ends with a bias correction for the learned rounding, "
              "measured (each trained layer's output brought to the float channel means, layer by layer, in the "
              "quantized model, in one pass) or analytic (PTQ's), whichever gives the smaller output error on "
              "held-back samples; interest points are taken after a fused activation. MCT's time is mostly its "
              "Hessian estimate (100 random vectors, one backward pass per vector and interest point; ours: 32 "
              "vectors, one backward pass for all points); per training step both tools cost about the same.",
              "", "MobileNetV2 notes: GPTQ learns a rounding decision for each of 3.5 M weights; on crops of a dozen "
              "photos it fits them and gains nothing elsewhere (a probe outside this script with the PTQ benchmark's "
              "disjoint-photo split, 128 crops "
              "of about ten photos, 5 epochs, no Hessian: +2.3 dB SQNR on the calibration crops, +0.06 dB on crops "
              "of the other photos), hence calibration on every photo and evaluation on the ImageNet images. "
              "MCT's default configuration cannot finish here (see the row's note); without Hessian weights it "
              "ends, without an error in its log, at a collapsed model; we did not look further into it."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
