"""`hwquant report`: why a quantized model lost accuracy (the troubleshooting report, hwquant.xquant)."""
from __future__ import annotations

import math
import os
from typing import Any, Optional

import click

from hwquant.cli.inputs import (batches, framework_of_file, load_arrays, load_float_model, load_quantized_model,
                                trust_option)
from hwquant.cli.quiet import framework_output_option
from hwquant.errors import HwquantError


@click.command(short_help="The troubleshooting report: which layers lose accuracy, and fixes.")
@click.argument("float_model")
@click.argument("quantized_model")
@click.option("--data", "data_path", required=True, metavar="FILE",
              help="Representative inputs: a .npy file (one input) or .npz file (one array per model input, in order), "
                   "samples on the first axis, in the model's own layout and preprocessing.")
@click.option("--val-data", "val_path", metavar="FILE",
              help="Validation inputs, same format (default: the --data inputs).")
@click.option("--report-dir", required=True, metavar="DIR", help="Folder to write the report into (created if missing).")
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1), help="Samples per batch.")
@click.option("--max-batches", type=click.IntRange(min=1), help="Use at most this many batches of each dataset.")
@click.option("--troubleshoot/--no-troubleshoot", default=True, show_default=True,
              help="Judge the causes of degraded layers and draw MCT's troubleshooting graphs.")
@click.option("--measure-fixes", default=3, show_default=True, type=click.IntRange(min=0),
              help="How many of the most promising fixes to measure by quantizing the float model again (0: none).")
@click.option("--zscore", default=5.0, show_default=True, type=float,
              help="Z-score above which a degraded layer's values count as outliers.")
@click.option("--degrade-ratio", default=0.5, show_default=True, type=float,
              help="If more than this fraction of layers is degraded, causes are not judged.")
@click.option("--tpc-version", help="Target platform version to measure fixes with (default: the one the quantized "
                                    "model records), e.g. 4.0.")
@click.option("--device-type", default="imx500", show_default=True, help="Target platform family for --tpc-version.")
@click.option("--html/--no-html", default=True, show_default=True, help="Write report.html.")
@click.option("--tensorboard/--no-tensorboard", default=True, show_default=True,
              help="Write TensorBoard events (needs tensorboardX).")
@trust_option
@framework_output_option
def report(float_model: str, quantized_model: str, data_path: str, val_path: Optional[str], report_dir: str,
           batch_size: int, max_batches: Optional[int], troubleshoot: bool, measure_fixes: int, zscore: float,
           degrade_ratio: float, tpc_version: Optional[str], device_type: str, html: bool, tensorboard: bool,
           trust_model_file: bool) -> None:
    """Why did QUANTIZED_MODEL lose accuracy against FLOAT_MODEL? Writes the troubleshooting report
    (report.html, report.json, MCT's quant_report.json and troubleshoot_report.json) into --report-dir and
    prints its summary.

    FLOAT_MODEL: a .keras / .h5 file, a .pt / .pth file holding a whole torch.nn.Module (torch.save(model, path):
    torch.nn and torchvision layers are read, anything else the pickle names is refused unless --trust-model-file),
    or 'package.module:function' returning the PyTorch model. QUANTIZED_MODEL: the quantized model saved by
    hwquant (mct.exporter.save_quantized_model's .pt, or keras_export_model's / model.save's .keras)."""
    import hwquant as mct

    framework = framework_of_file(quantized_model)
    arrays = load_arrays(data_path, "--data")
    val_arrays = load_arrays(val_path, "--val-data") if val_path else arrays
    float_net = load_float_model(float_model, trust=trust_model_file)
    quantized = load_quantized_model(quantized_model, trust=trust_model_file)
    tpc = mct.get_target_platform_capabilities(tpc_version, device_type) if tpc_version else None
    config = mct.xquant.XQuantConfig(report_dir, threshold_degrade_layer_ratio=degrade_ratio,
                                     threshold_zscore_outlier_removal=zscore, measure_fixes=measure_fixes,
                                     max_batches=max_batches, html=html, tensorboard=tensorboard,
                                     target_platform_capabilities=tpc)
    prefix = "pytorch" if framework == "pytorch" else "keras"
    name = f"xquant_report_troubleshoot_{prefix}_experimental" if troubleshoot else f"xquant_report_{prefix}_experimental"
    try:
        result = getattr(mct.xquant, name)(float_net, quantized, batches(arrays, batch_size, False),
                                           batches(val_arrays, batch_size, True), config)
    except HwquantError as e:
        raise click.ClickException(str(e)) from e
    similarity = result[0] if troubleshoot else result
    click.echo(summary(similarity.report, report_dir))


def summary(report: dict, report_dir: str) -> str:
    """What the terminal shows: the output's similarity, the degraded layers, the fixes measured, the files."""
    def db(v: Any) -> str:
        return f"{v:.1f} dB" if isinstance(v, float) and math.isfinite(v) else str(v)
    lines = []
    for dataset, label in (("repr", "representative"), ("val", "validation")):
        o = report["output"][dataset]
        agree = f", top-1 agreement {100 * o['agreement']:.1f} %" if o.get("agreement") is not None else ""
        lines.append(f"output SQNR ({label}): {db(o['sqnr_db'])}, cosine {o['cs']:.4f}{agree}")
    compared = sum(1 for r in report["layers"] if r["compared"])
    lines.append(f"degraded layers: {len(report['degraded'])} of {compared}"
                 + (f" ({', '.join(report['degraded'][:5])}{', ...' if len(report['degraded']) > 5 else ''})"
                    if report["degraded"] else ""))
    for key, items in (report.get("causes") or {}).items():
        lines.append(f"judged cause {key}: {len(items)}")
    measured = [f for f in report["fixes"] if f.get("measured")]
    if report.get("baseline"):
        lines.append(f"fixes (quantized again; without a fix: {db(report['baseline']['sqnr_db'])}):")
    for fix in measured:
        lines.append(f"  {fix['measured']['gain_db']:+.2f} dB  {fix['title']}"
                     + ("" if fix["deployable"] else "  [diagnosis]"))
    lines.append(f"report: {os.path.join(report_dir, 'report.html')}")
    return "\n".join(lines)
