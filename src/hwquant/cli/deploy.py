"""`hwquant export` (a saved quantized model to another format) and `hwquant check` (does an exported file compute
what the quantized model computes, and will the IMX500 converter take it)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Tuple

import click
import numpy as np

from hwquant.cli.inputs import PRESETS, adapter, batches, framework_of_file, load_data, load_quantized_model, trust_option
from hwquant.cli.quantize import check_out, similarity
from hwquant.cli.quiet import filtered_stderr, framework_output_option
from hwquant.errors import HwquantError, UnsafeModelFileError

DEFAULT_MIN_SQNR_DB = 30.0
CHECK_SAMPLES = 64


def _input_batch(shape: str) -> List[np.ndarray]:
    try:
        dims = tuple(int(d) for d in shape.split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise click.BadParameter(f"'{shape}': give the input's shape with its batch, e.g. 1,3,224,224",
                                 param_hint="--input-shape")
    return [np.zeros(dims, np.float32)]


@click.command(short_help="Write a saved quantized model in another format.")
@click.argument("quantized_model")
@click.argument("out")
@click.option("--format", "fmt", type=click.Choice(["mctq", "qdq", "int8"]), default="mctq", show_default=True,
              help="How quantization appears in an .onnx file of a PyTorch model.")
@click.option("--data", "data_spec", metavar="DATA",
              help="Inputs to trace a PyTorch model with (one batch is read): a folder of images, .npy / .npz or "
                   "'module:callable'; or give --input-shape.")
@click.option("--input-shape", metavar="N,C,H,W", help="Trace a PyTorch model with zeros of this shape instead.")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default="unit", show_default=True,
              help="Image preprocessing when --data is a folder (as for `hwquant quantize`).")
@trust_option
@framework_output_option
def export(quantized_model: str, out: str, fmt: str, data_spec: Optional[str], input_shape: Optional[str],
           preset: str, trust_model_file: bool) -> None:
    """Write QUANTIZED_MODEL (saved by hwquant: a .pt from `hwquant quantize --out x.pt` or
    mct.exporter.save_quantized_model, or a quantized .keras file) as OUT, in the format OUT's suffix names
    (see `hwquant quantize --help`)."""
    fw = adapter(framework_of_file(quantized_model))
    check_out(out, fw, fmt)
    if Path(out).resolve() == Path(quantized_model).resolve():
        raise click.BadParameter("OUT is QUANTIZED_MODEL itself: give another file", param_hint="OUT")
    model = load_quantized_model(quantized_model, trust=trust_model_file)
    sample: List[np.ndarray] = []
    if fw.NAME == "pytorch" and Path(out).suffix != ".pt":
        if data_spec is None and input_shape is None:
            raise click.UsageError("a PyTorch model is traced to export it: give --data (inputs) or --input-shape")
        sample = _input_batch(input_shape) if input_shape else \
            [a[:1] for a in load_data(data_spec or "", PRESETS[preset], fw.CHANNELS_LAST)]
    try:
        written = fw.export(model, out, batches(sample, 1) if sample else (lambda: iter(())), fmt)
    except HwquantError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"wrote {written} ({os.path.getsize(written) / 1e6:.2f} MB)")


def _converter() -> Optional[str]:
    return os.environ.get("HWQUANT_IMXCONV") or shutil.which("imxconv-pt")


def imx500_checks(path: str, proto: Any, run_converter: bool) -> Tuple[List[str], List[str]]:
    """(problems, notes) of an MCTQ ONNX file (`proto`, read from `path`) for the IMX500: the converter's operator,
    opset and grid rules (exporter.imx500: a non-power-of-two activation quantizer is an operator it lacks), and the
    real converter's verdict where it is installed."""
    from hwquant.exporter.imx500 import converter_problems
    meta = {p.key: p.value for p in proto.metadata_props}
    problems = converter_problems(proto, meta.get("tpc_minor_version"))
    notes = []
    converter = _converter()
    if converter is None:
        notes.append("Sony's converter (imxconv-pt) is not installed: its rules were checked, the converter not run "
                     "(put imxconv-pt on PATH or set HWQUANT_IMXCONV to run it)")
    elif run_converter and not problems:
        click.echo(f"running Sony's converter {converter} (a minute or two)", err=True)
        with tempfile.TemporaryDirectory() as folder:
            out = os.path.join(folder, "out")  # the converter refuses an output folder that exists
            run = subprocess.run([converter, "-i", path, "-o", out], capture_output=True, text=True)
            if run.returncode != 0:
                said = [line.strip() for line in (run.stdout + run.stderr).splitlines()
                        if line.strip() and not line.strip().startswith("at ")]
                problems.append(f"Sony's converter refused the file (exit {run.returncode}): {' | '.join(said[-3:])}")
            elif (fits := _fits_in_chip(out)) is False:
                problems.append("Sony's converter took the file, but its memory report says the model does NOT fit in "
                                "the chip: set a memory target (hwquant quantize --weights-memory / "
                                "--activation-memory)")
            else:
                notes.append(f"Sony's converter ({converter}) took the file"
                             + ("; its memory report: fits in the chip" if fits else ""))
    return problems, notes


def _fits_in_chip(out: str) -> Optional[bool]:
    """Whether the converter's memory report says the model fits in the chip's memory (None without a report)."""
    import json
    report = next(Path(out).rglob("*MemoryReport.json"), None)
    if report is None:
        return None
    try:
        return bool(json.loads(report.read_text())["Memory Report"]["Fit In Chip"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@click.command(short_help="Check an exported file against the simulated model and the IMX500 rules.")
@click.argument("exported")
@click.argument("quantized_model", required=False)
@click.option("--data", "data_spec", metavar="DATA",
              help="Inputs to compare the outputs on (folder of images, .npy / .npz, 'module:callable'); the first "
                   f"{CHECK_SAMPLES} samples are used.")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default="unit", show_default=True,
              help="Image preprocessing when --data is a folder (as for `hwquant quantize`).")
@click.option("--min-sqnr", default=DEFAULT_MIN_SQNR_DB, show_default=True, type=float,
              help="The exported file agrees when its output's SQNR against the simulated model is at least this (dB).")
@click.option("--converter/--no-converter", "run_converter", default=True, show_default=True,
              help="Run Sony's IMX500 converter on an MCTQ file when it is installed.")
@trust_option
@framework_output_option
def check(exported: str, quantized_model: Optional[str], data_spec: Optional[str], preset: str, min_sqnr: float,
          run_converter: bool, trust_model_file: bool) -> None:
    """Check an EXPORTED file: run it as deployed (ONNX Runtime, the TFLite interpreter, TorchScript) on --data and
    compare its output with QUANTIZED_MODEL's simulation (the saved hwquant model it was exported from); for an MCTQ
    ONNX file, check the IMX500 converter's operator, opset and grid rules (and run the converter when installed).

    Exit 0: every check passed; 1: a check failed (printed); 2: bad input."""
    if not os.path.isfile(exported):
        raise click.BadParameter(f"no file at '{exported}'", param_hint="EXPORTED")
    suffix = Path(exported).suffix
    if suffix not in (".onnx", ".tflite", ".torchscript", ".pt", ".keras"):
        raise click.BadParameter(f"'{exported}': expected an exported .onnx, .tflite, .torchscript, .pt or .keras file",
                                 param_hint="EXPORTED")
    if quantized_model is not None and data_spec is None:
        raise click.UsageError("comparing with QUANTIZED_MODEL needs inputs: give --data")
    failed, lines = False, []
    if suffix == ".onnx":
        from hwquant.model_files import load_onnx
        try:
            proto = load_onnx(exported)  # external data outside the file's folder refused
        except UnsafeModelFileError as e:
            raise click.BadParameter(str(e), param_hint="EXPORTED") from None
        except Exception as e:  # noqa: BLE001 - protobuf's decode errors
            raise click.BadParameter(f"'{exported}' is not a readable ONNX file: {e}", param_hint="EXPORTED") from None
        if any(p.key == "quantization_format" and p.value == "MCTQ" for p in proto.metadata_props):
            problems, notes = imx500_checks(exported, proto, run_converter)
            lines += [f"IMX500: {p}" for p in problems] or ["IMX500: the converter's operator, opset and grid rules "
                                                            "hold"]
            lines += [f"IMX500: {n}" for n in notes]
            failed |= bool(problems)
    if quantized_model is not None:
        fw = adapter(framework_of_file(quantized_model))
        model = load_quantized_model(quantized_model, trust=trust_model_file)
        inputs = [a[:CHECK_SAMPLES] for a in load_data(data_spec or "", PRESETS[preset], fw.CHANNELS_LAST)]
        runner = adapter("keras" if suffix in (".tflite", ".keras") else fw.NAME)
        try:
            with filtered_stderr():  # (the TFLite interpreter's info lines)
                deployed = runner.run_exported(exported, inputs, trust=trust_model_file)
        except UnsafeModelFileError as e:
            raise click.BadParameter(str(e), param_hint="EXPORTED") from None
        except Exception as e:  # noqa: BLE001 - the runtime's own refusal, said in one line
            raise click.ClickException(f"cannot run '{exported}': {type(e).__name__}: {str(e).splitlines()[0]}") \
                from None
        simulated = fw.predict(model, inputs)
        if len(deployed) != len(simulated) or any(d.shape != s.shape for d, s in zip(deployed, simulated)):
            failed = True
            lines.append(f"outputs: the file gives shapes {[d.shape for d in deployed]}, the model "
                         f"{[s.shape for s in simulated]}")
        else:
            for i, (d, s) in enumerate(zip(deployed, simulated)):
                sqnr, agreement = similarity(s, d)
                ok = sqnr >= min_sqnr
                failed |= not ok
                lines.append(f"output {i}: SQNR {sqnr:.1f} dB against the simulated model"
                             + (f", top-1 agreement {100 * agreement:.1f} %" if agreement is not None else "")
                             + f", largest difference {float(np.abs(d - s).max()):.3g}: "
                             + ("agrees" if ok else f"DISAGREES (below --min-sqnr {min_sqnr:g} dB)"))
    elif suffix != ".onnx":
        lines.append("outputs not compared: give QUANTIZED_MODEL and --data")
    click.echo("\n".join([f"{exported}:"] + [f"  {line}" for line in lines]))
    if failed:
        raise SystemExit(1)
