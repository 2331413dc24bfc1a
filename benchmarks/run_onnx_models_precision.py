"""Precision options for the real models shipped as ONNX (benchmarks/real_models/, converted by onnx2torch):
what the IMX500 TPCs allow to recover their output fidelity, printed as a markdown table.

    .venv/bin/python benchmarks/run_onnx_models_precision.py [--models ppocr_det_dbnet] [--calib 64 --eval 64]

For each model, hwquant PTQ (defaults otherwise) with:
  - IMX500 1.0 (the default TPC: 8-bit activations only);
  - IMX500 4.0, its defaults (8-bit activations);
  - IMX500 4.0 with 16-bit activations on the --top most sensitive activation quantizers (manual
    BitWidthConfig). Sensitivity: on the 4.0 model, each activation quantizer switched off alone (the
    others on), on the first calibration samples: the output noise that removes;
  - IMX500 4.0, every activation the TPC lets take 16 bits at 16 (mixed precision under an activation-memory
    target no configuration exceeds: the largest candidates everywhere, kernels at 8 bits);
  - IMX500 4.0 mixed precision, activation memory <= r x the all-8-bit figure (--ratios), kernels at 8 bits.
Each cell: output SQNR against the float model (all outputs flattened), task agreement (run_real_models.TASKS),
activation quantizers at 16 bits / all.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path
from typing import Callable, List

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import real_models  # noqa: E402
from benchmarks.run_ptq import seed_everything  # noqa: E402
from benchmarks.run_real_models import TASKS, flat_outputs, sqnr_db  # noqa: E402

MODELS = list(real_models.ONNX_MODELS)
HOLDER_SUFFIX = "_activation_holder_quantizer"


def _tpc(version: str):
    import hwquant as mct
    return mct.get_target_platform_capabilities(tpc_version=version, device_type="imx500")


def _ptq(model, calib: List[torch.Tensor], batch: int, tpc, core_config=None, ru=None):
    import hwquant as mct

    def rep_gen():
        for i in range(0, len(calib[0]), batch):
            yield [t[i:i + batch] for t in calib]
    kwargs = {"target_platform_capabilities": tpc}
    if core_config is not None:
        kwargs["core_config"] = core_config
    if ru is not None:
        kwargs["target_resource_utilization"] = ru
    return mct.ptq.pytorch_post_training_quantization(model, rep_gen, **kwargs)


def activation_bits(q) -> tuple:
    """(activation quantizers at 16 bits, all activation quantizers) of a quantized model."""
    from hwquant.torch.quantizers import quantizer_slots
    bits = [getattr(qz, "num_bits", 8) for _, _, name, qz in quantizer_slots(q) if name is None]
    return sum(b == 16 for b in bits), len(bits)


def rank_activation_quantizers(q, ref: torch.Tensor, inputs: List[torch.Tensor], batch: int) -> List[tuple]:
    """(output noise removed, relative to the float output's power, node name) for every activation
    quantizer of `q` switched off alone with all the others on, largest first. `ref`: the float model's
    flattened outputs on `inputs`. Judged with the others on, since the errors do not add up (each
    quantizer on alone, against a model with none, costs several times the total). Changes `q` (integer
    kernels off): use a model made for it."""
    from hwquant.torch.quantizers import PytorchQuantizationWrapper, quantizer_slots, set_quantizer
    for m in q.modules():
        if isinstance(m, PytorchQuantizationWrapper):  # the integer path reads a fixed input grid
            m.input_scale = None
            m.__dict__["_input_holder"] = None
    power = ref.pow(2).mean().item()
    noise = (flat_outputs(q, inputs, batch) - ref).pow(2).mean().item()
    ranked = []
    for path, owner, name, qz in list(quantizer_slots(q)):
        if name is not None or not path.endswith(HOLDER_SUFFIX):
            continue
        set_quantizer(owner, name, lambda x: x)
        without = (flat_outputs(q, inputs, batch) - ref).pow(2).mean().item()
        set_quantizer(owner, name, qz)
        ranked.append(((noise - without) / power, path[:-len(HOLDER_SUFFIX)]))
    return sorted(ranked, reverse=True)


def run_model(name: str, args) -> List[tuple]:
    """[(option, figures or error)] for one model."""
    import hwquant as mct
    seed_everything(0)
    rm = real_models.REGISTRY[name]()
    calib, evals = rm.make_inputs(args.calib, 0), rm.make_inputs(args.eval, 1)
    ref = flat_outputs(rm.model, evals, args.batch)
    task = TASKS[name][1]
    results = []

    def measure(label: str, make: Callable):
        t0 = time.perf_counter()
        try:
            q, _ = make()
        except Exception as e:  # noqa: BLE001 - reported in the table
            results.append((label, f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"))
            print(f"  {label}: {results[-1][1]}", flush=True)
            return None
        out = flat_outputs(q, evals, args.batch)
        n16, n = activation_bits(q)
        cell = f"{sqnr_db(ref, out):.1f} dB, {task(ref, out):.3f}, {n16}/{n}"
        results.append((label, cell))
        print(f"  {label}: {cell} ({time.perf_counter() - t0:.0f} s)", flush=True)
        return q

    measure("IMX500 1.0", lambda: _ptq(rm.model, calib, args.batch, _tpc("1.0")))
    tpc4 = _tpc("4.0")
    q4 = measure("IMX500 4.0", lambda: _ptq(rm.model, calib, args.batch, tpc4))
    if q4 is not None:
        some = [t[:args.rank_samples] for t in calib]
        ranked = rank_activation_quantizers(q4, flat_outputs(rm.model, some, args.batch), some, args.batch)
        top = [n for _, n in ranked[:args.top]]
        print("  most sensitive activations (output noise removed when float alone, of the output power): "
              + ", ".join(f"{n} {e:.2%}" for e, n in ranked[:args.top]), flush=True)
        bit_cfg = mct.core.BitWidthConfig()
        bit_cfg.set_manual_activation_bit_width([mct.core.network_editor.NodeNameFilter(n) for n in top], 16)
        measure(f"IMX500 4.0, 16-bit: {args.top} most sensitive",
                lambda: _ptq(rm.model, calib, args.batch, tpc4, mct.core.CoreConfig(bit_width_config=bit_cfg)))
    ru8 = mct.core.pytorch_resource_utilization_data(
        rm.model, lambda: iter([[t[:args.batch] for t in calib]]), target_platform_capabilities=tpc4)
    a8 = ru8.activation_memory
    mp = mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig())
    measure("IMX500 4.0, 16-bit wherever allowed",
            lambda: _ptq(rm.model, calib, args.batch, tpc4, mp, mct.core.ResourceUtilization(activation_memory=4 * a8)))
    for r in args.ratios:
        measure(f"IMX500 4.0, mixed precision, activation memory <= {r:g} x 8-bit",
                lambda r=r: _ptq(rm.model, calib, args.batch, tpc4, mp,
                                 mct.core.ResourceUtilization(activation_memory=r * a8)))
    return results


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--top", type=int, default=8, help="activation quantizers set to 16 bits by hand")
    ap.add_argument("--rank-samples", type=int, default=8, help="calibration samples the ranking runs on")
    ap.add_argument("--ratios", type=float, nargs="+", default=[1.0, 1.25, 1.5])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    table = {}
    for name in args.models:
        print(f"== {name}", flush=True)
        table[name] = run_model(name, args)
    options = list(dict.fromkeys(label for rows in table.values() for label, _ in rows))
    print(f"\nMeasured {datetime.date.today()} on {platform.machine()} CPU ({args.threads} threads), "
          f"{args.calib} calibration / {args.eval} evaluation samples. Each cell: output SQNR, task agreement "
          f"({'; '.join(f'{n}: {TASKS[n][0]}' for n in args.models)}), activation quantizers at 16 bits / all.\n")
    print("| option | " + " | ".join(args.models) + " |")
    print("|---|" + "---|" * len(args.models))
    for opt in options:
        print(f"| {opt} | " + " | ".join(dict(table[n]).get(opt, "-").replace("|", "/") for n in args.models) + " |")


if __name__ == "__main__":
    main()
