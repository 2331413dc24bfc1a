"""The command line: ``hwquant <command>`` (also ``python -m hwquant``).

    hwquant quantize MODEL --data DATA --tpc imx500:4.0 --out model.onnx
    hwquant export QUANTIZED_MODEL OUT        hwquant check EXPORTED_FILE QUANTIZED_MODEL --data DATA
    hwquant report FLOAT_MODEL QUANTIZED_MODEL --data calib.npz --report-dir out/
    hwquant tpc list | show NAME | export NAME FILE | check FILE

Commands are thin: each reads files, calls the public API and prints what a person needs. Exit codes: 0 done,
1 the job failed (the message says why), 2 bad input or usage (one line says what is wrong and what to do;
nothing is written)."""
from hwquant.cli.app import main

__all__ = ["main"]
