"""What the IMX500 rule of shift-negative correction costs or gains, on the real models of the real-models table.

    bash benchmarks/fetch_real_models.sh
    .venv/bin/python benchmarks/run_snc_imx500.py            # prints the table (and writes its section)

The IMX500 converter refuses a convolution -> activation group whose output has no quantizer, so on IMX500
TPCs the shifted activation keeps a 16-bit quantizer, and where the TPC offers no 16-bit activation for it
(IMX500 1.0) the activation is not shifted (core/passes/shift_negative.py). Before, the activation was left
float (fused into the add), which the converter refused. Each model is quantized by hwquant with its
defaults on the IMX500 1.0 and 4.0 TPCs, once as now and once with the former rule (the same TPC on no
named platform, which leaves the shifted activation float), and the output SQNR against float and the
task agreement are compared on held-out samples (the real-models table's samples and metrics).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import real_models, report  # noqa: E402
from benchmarks.run_ptq import seed_everything  # noqa: E402
from benchmarks.run_real_models import TASKS, flat_outputs, run_hwquant, sample_arguments, sqnr_db  # noqa: E402

SECTION = "Shift-negative correction on the IMX500: the converter's rule, measured"


def main(argv=None) -> None:
    import hwquant as mct
    import hwquant.core.pipeline.stages as pipeline

    ap = sample_arguments(argparse.ArgumentParser(description=__doc__,
                                                  formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    counts = {}
    original = pipeline.apply_shift_negative_correction

    def counting(state, data):  # how many activations each run shifts (the pass returns it)
        n = original(state, data)
        counts["n"] = counts.get("n", 0) + n
        return n
    pipeline.apply_shift_negative_correction = counting

    rows = []
    for name in args.models:
        seed_everything(0)
        rm = real_models.REGISTRY[name]()
        calib, evals = rm.make_inputs(args.calib, 0), rm.make_inputs(args.eval, 1)
        ref = flat_outputs(rm.model, evals)
        label, task = TASKS[name]
        cells = []
        for version in ("1.0", "4.0"):
            tpc = mct.get_target_platform_capabilities(version, "imx500")
            for rule, chosen in (("now", tpc), ("before", tpc.model_copy(update={"tpc_platform_type": None}))):
                counts.clear()
                res = run_hwquant(rm.model, calib, evals, args.batch, tpc=chosen)
                cells.append(f"error: {res['error']}" if "error" in res else
                             f"{sqnr_db(ref, res['out']):.1f} dB, {task(ref, res['out']):.3f} "
                             f"({counts.get('n', 0)} shifted)")
                print(name, version, rule, cells[-1], flush=True)
        rows.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    table = ("| model | task metric | 1.0 now | 1.0 before | 4.0 now | 4.0 before |\n"
             "|---|---|---|---|---|---|\n" + "\n".join(rows))
    text = (f"`benchmarks/run_snc_imx500.py`: hwquant's defaults, {args.calib} calibration and {args.eval} "
            "held-out samples per model (the real-models table's). Each cell: output SQNR against float, the "
            "task agreement, and how many activations shift-negative correction shifted. 'now': on the IMX500 "
            "the shifted activation keeps a 16-bit quantizer (the converter requires it), and is not shifted "
            "where the TPC offers no 16 bits (1.0); 'before': the former rule, the shifted activation left "
            "float, which the converter refuses.\n\n" + table)
    report.publish(SECTION, text, write=not args.no_write)


if __name__ == "__main__":
    main()
