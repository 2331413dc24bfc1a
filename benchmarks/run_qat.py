"""Quantization-aware training benchmark: the Fashion-MNIST CNNs at W8A8 and W4A4, float against
PTQ against QAT (STE and LSQ quantizers), trained with a plain PyTorch loop as a user would.

    .venv/bin/python benchmarks/run_qat.py                  # writes its section of docs/BENCHMARKS.md
    .venv/bin/python benchmarks/run_qat.py --no-write --models plain_cnn --bits w4a4 --epochs 1

W4A4: every kernel and every activation at 4 bits (the default TPC, IMX500 1.0: power-of-two
activations, symmetric per-channel kernels) but the model's input image and its output logits, kept at 8 bits
(as in the LSQ paper's first and last layers: a 4-bit input image loses information no training can
recover, and 16-level logits make argmax ties). W8A8: the TPC's defaults. QAT: PTQ on 512 training
images, then `--epochs` epochs over the 60k training images (batch 128, AdamW, cosine schedule from
`--lr`, cross-entropy on the labels, channels-last), then finalize. (The quantizers' parameters in
their own group at a tenth of the rate, `--qparam-lr-ratio 0.1`, did worse: mobile_cnn W4A4 LSQ
3 epochs 88.72 % against 88.98 %.) Reported: labelled accuracy on
the 10k test images (against the float model, and against the float model trained as many more
epochs with the same loop), the wall time of PTQ / QAT initialisation / training, and the cost of
one QAT training step against one float training step of the same model, measured in the same run.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import assets, metrics, models, report  # noqa: E402
from benchmarks.run_ptq import seed_everything  # noqa: E402

SECTION = "Quantization-aware training (Fashion-MNIST)"
OUT = ROOT / ".cache" / "benchmarks" / "qat.json"


def core_config(bits: str):
    import hwquant as mct
    from hwquant.core.configuration.network_editor import ChangeFinalActivationQuantConfigAttr, EditRule, NodeNameFilter
    if bits == "w8a8":
        return mct.core.CoreConfig()
    qc = mct.core.QuantizationConfig(weights_n_bits=4, activation_n_bits=4)
    keep_8 = [EditRule(NodeNameFilter(name), ChangeFinalActivationQuantConfigAttr(activation_n_bits=8))
              for name in ("x", "classifier")]  # the input image and the logits
    return mct.core.CoreConfig(qc, debug_config=mct.core.DebugConfig(network_editor=keep_8))


def step_cost(model, train_x, train_y, batch, steps=30) -> float:
    """Seconds per training step (forward, backward, AdamW) after a short warm-up."""
    model = copy.deepcopy(model).train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-9)
    for i in range(steps + 5):
        if i == 5:
            t0 = time.perf_counter()
        idx = slice(i * batch, (i + 1) * batch)
        loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / steps


def train(model, train_x, train_y, epochs: int, lr: float, qparam_lr: float, batch: int, seed: int) -> float:
    """The user's loop: AdamW with the quantizers' parameters in their own group (``qparam_lr``)."""
    from hwquant.trainable_infrastructure import BasePytorchTrainableQuantizer, VariableGroup
    steps = epochs * (len(train_x) // batch)
    qparams = {id(p) for m in model.modules() if isinstance(m, BasePytorchTrainableQuantizer)
               for p in m.get_trainable_variables(VariableGroup.QPARAMS)}
    weights = [p for p in model.parameters() if p.requires_grad and id(p) not in qparams]
    groups = [{"params": weights, "lr": lr},
              {"params": [p for p in model.parameters() if id(p) in qparams], "lr": qparam_lr}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    return models.fit(model, train_x, train_y, opt, sched, epochs, batch, seed)


def run_model(name: str, args) -> list:
    import hwquant as mct
    train_x, train_y, test_x, test_y = assets.fashion_mnist()
    train_cl = train_x.contiguous(memory_format=torch.channels_last)
    calib = train_x[torch.randperm(len(train_x), generator=torch.Generator().manual_seed(args.seed))[:512]]

    def rep_gen():
        for i in range(0, len(calib), 64):
            yield [calib[i:i + 64]]

    model = models.trained_fashion_model(name)
    float_acc = metrics.accuracy(model, test_x, test_y)
    float_step = step_cost(model.to(memory_format=torch.channels_last), train_cl, train_y, args.batch)
    model = model.to(memory_format=torch.contiguous_format)
    rows = [{"model": name, "bits": "float", "method": "float", "accuracy": float_acc}]
    print(f"{name}: float {float_acc:.2%}, float training step {float_step * 1000:.0f} ms", flush=True)
    # The fair reference for QAT: the float model trained further with the same loop and epochs.
    tuned = copy.deepcopy(model).to(memory_format=torch.channels_last)
    tuned_s = train(tuned, train_cl, train_y, args.epochs, args.lr, args.lr, args.batch, args.seed)
    tuned_acc = metrics.accuracy(tuned.eval(), test_x, test_y)
    rows.append({"model": name, "bits": "float", "method": f"float + {args.epochs} epochs", "accuracy": tuned_acc,
                 "train_seconds": tuned_s})
    print(f"  float trained {args.epochs} more epochs: {tuned_acc:.2%} ({tuned_s:.0f} s)", flush=True)
    for bits in args.bits:
        cc = core_config(bits)
        seed_everything(args.seed)
        t0 = time.perf_counter()
        ptq, _ = mct.ptq.pytorch_post_training_quantization(model, rep_gen, core_config=cc)
        ptq_s = time.perf_counter() - t0
        ptq_acc = metrics.accuracy(ptq, test_x, test_y)
        rows.append({"model": name, "bits": bits, "method": "PTQ", "accuracy": ptq_acc, "seconds": ptq_s})
        print(f"  {bits} PTQ {ptq_acc:.2%} ({ptq_s:.1f} s)", flush=True)
        for method in args.methods:
            seed_everything(args.seed)
            cfg = mct.qat.QATConfig(weight_training_method=method, activation_training_method=method)
            t0 = time.perf_counter()
            qat, _ = mct.qat.pytorch_quantization_aware_training_init_experimental(model, rep_gen, core_config=cc,
                                                                                   qat_config=cfg)
            init_s = time.perf_counter() - t0
            qat = qat.to(memory_format=torch.channels_last)
            qat_step = step_cost(qat, train_cl, train_y, args.batch)
            train_s = train(qat, train_cl, train_y, args.epochs, args.lr, args.lr * args.qparam_lr_ratio, args.batch,
                            args.seed)
            qat.eval()
            trained = metrics.predict(qat, test_x, 1000)
            final = mct.qat.pytorch_quantization_aware_training_finalize_experimental(qat)
            final_pred = metrics.predict(final, test_x, 1000)
            assert torch.equal(final_pred, trained), "finalized model differs from the trained model"
            acc = metrics.labelled_top1(final_pred, test_y) / len(test_y)
            rows.append({"model": name, "bits": bits, "method": f"QAT {method}", "accuracy": acc,
                         "init_seconds": init_s, "train_seconds": train_s, "epochs": args.epochs,
                         "step_ratio": qat_step / float_step})
            print(f"  {bits} QAT {method}: {acc:.2%} (init {init_s:.1f} s, {args.epochs} epochs {train_s:.0f} s, "
                  f"step {qat_step / float_step:.1f}x float)", flush=True)
    for r in rows:
        r["delta"] = r["accuracy"] - float_acc
        r["delta_tuned"] = r["accuracy"] - tuned_acc
    return rows


def render(rows: list, args) -> str:
    qparam_lr = "" if args.qparam_lr_ratio == 1 else f", quantizer parameters at lr {args.lr * args.qparam_lr_ratio:g}"
    lines = [f"`benchmarks/run_qat.py`, last run {datetime.date.today().isoformat()}: labelled accuracy on the "
             f"10k Fashion-MNIST test images. QAT: PTQ first (512 training images), then {args.epochs} epochs over "
             f"the 60k training images with a plain PyTorch loop (batch {args.batch}, AdamW, cosine schedule from "
             f"lr {args.lr:g}{qparam_lr}, cross-entropy), then finalize; the finalized model's predictions equal the trained "
             f"model's (checked). Default TPC (IMX500 1.0: power-of-two activations, symmetric per-channel kernels). W4A4: "
             f"every kernel and activation at 4 bits but the input image and the logits (8 bits).",
             "",
             f"Two float references: the cached model (trained 2 epochs, the one PTQ and QAT start from) and the same "
             f"model trained {args.epochs} epochs more with QAT's loop, so that QAT's extra training is not counted "
             f"as quantization accuracy.",
             "",
             "| model | bits | method | accuracy | vs float | vs float trained as long | time | QAT step / float step |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["method"] == "float":
            time_s, ratio = "–", "–"
        elif r["method"] == "PTQ":
            time_s, ratio = f"{r['seconds']:.1f} s", "–"
        elif r["bits"] == "float":
            time_s, ratio = f"{r['train_seconds']:.0f} s training", "1×"
        else:
            time_s = f"{r['init_seconds']:.1f} s + {r['train_seconds']:.0f} s training"
            ratio = f"{r['step_ratio']:.1f}×"
        delta = "–" if r["bits"] == "float" else f"{100 * r['delta']:+.2f}"
        delta_tuned = "–" if r["bits"] == "float" else f"{100 * r['delta_tuned']:+.2f}"
        lines.append(f"| {r['model']} | {r['bits']} | {r['method']} | {100 * r['accuracy']:.2f}% | {delta} | "
                     f"{delta_tuned} | {time_s} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["plain_cnn", "mobile_cnn"])
    p.add_argument("--bits", nargs="+", default=["w8a8", "w4a4"], choices=["w8a8", "w4a4"])
    p.add_argument("--methods", nargs="+", default=["STE", "LSQ"], choices=["STE", "LSQ"])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--qparam-lr-ratio", type=float, default=1.0,
                   help="learning rate of the quantizers' thresholds / ranges, relative to --lr")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(2)
    rows = [r for name in args.models for r in run_model(name, args)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(rows, indent=1))
    report.publish(SECTION, render(rows, args), write=not args.no_write)


if __name__ == "__main__":
    main()
