"""The command line: ``hwquant <command>`` (also ``python -m hwquant``).

    hwquant report FLOAT_MODEL QUANTIZED_MODEL --data calib.npz --report-dir out/
    hwquant tpc list | show NAME | export NAME FILE | check FILE

Commands are thin: each reads files, calls the public API and prints what a person needs."""
from __future__ import annotations

import importlib
import math
import os
from typing import Any, Callable, List, Optional

import click
import numpy as np

from hwquant.errors import HwquantError


def _load_arrays(path: str, what: str) -> List[np.ndarray]:
    """The model inputs stored in a .npy (one input) or .npz file (one array per input, in file order)."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise click.BadParameter(f"cannot read '{path}' as a .npy / .npz file of arrays: {e}", param_hint=what) from e
    arrays = [loaded[k] for k in loaded.files] if hasattr(loaded, "files") else [loaded]
    if not arrays or any(a.ndim == 0 or len(a) == 0 for a in arrays):
        raise click.BadParameter(f"'{path}' holds no samples (each array needs a first, sample axis of length >= 1)",
                                 param_hint=what)
    if len({len(a) for a in arrays}) != 1:
        raise click.BadParameter(f"the arrays in '{path}' hold different sample counts {[len(a) for a in arrays]}",
                                 param_hint=what)
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]


def _batches(arrays: List[np.ndarray], batch_size: int, labels: bool) -> Callable[[], Any]:
    def gen():
        for start in range(0, len(arrays[0]), batch_size):
            inputs = [a[start:start + batch_size] for a in arrays]
            yield (inputs, None) if labels else inputs
    return gen


def _framework(path: str) -> str:
    if path.endswith((".keras", ".h5", ".hdf5")):
        return "keras"
    if path.endswith((".pt", ".pth")) or ":" in path and not os.path.exists(path):
        return "pytorch"
    raise click.BadParameter(f"'{path}': expected a .keras / .h5 (Keras), a .pt / .pth file (PyTorch) or "
                             "'package.module:function' returning the PyTorch model")


def _load_float_model(spec: str) -> Any:
    if ":" in spec and not os.path.exists(spec):
        module, _, name = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise click.BadParameter(f"cannot import '{spec}': {e}", param_hint="FLOAT_MODEL") from e
        return factory() if callable(factory) else factory
    if not os.path.isfile(spec):
        raise click.BadParameter(f"no file at '{spec}'", param_hint="FLOAT_MODEL")
    framework = "keras" if _framework(spec) == "keras" else "torch"
    try:
        return importlib.import_module(f"hwquant.{framework}.xquant").load_float_model(spec)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="FLOAT_MODEL") from e


def _load_quantized_model(path: str) -> Any:
    if not os.path.isfile(path):
        raise click.BadParameter(f"no file at '{path}'", param_hint="QUANTIZED_MODEL")
    import hwquant as mct
    if _framework(path) == "keras":
        return mct.keras_load_quantized_model(path, compile=False)
    return mct.exporter.load_quantized_model(path)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def main() -> None:
    """hwquant: hardware-aware quantization of PyTorch and Keras models."""


@main.command()
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
def report(float_model: str, quantized_model: str, data_path: str, val_path: Optional[str], report_dir: str,
           batch_size: int, max_batches: Optional[int], troubleshoot: bool, measure_fixes: int, zscore: float,
           degrade_ratio: float, tpc_version: Optional[str], device_type: str, html: bool, tensorboard: bool) -> None:
    """Why did QUANTIZED_MODEL lose accuracy against FLOAT_MODEL? Writes the troubleshooting report
    (report.html, report.json, MCT's quant_report.json and troubleshoot_report.json) into --report-dir and
    prints its summary.

    FLOAT_MODEL: a .keras / .h5 file, a .pt / .pth file holding a whole torch.nn.Module (torch.save(model, path);
    loading it runs its pickled code: use your own files only), or 'package.module:function' returning the
    PyTorch model. QUANTIZED_MODEL: the quantized model saved by hwquant (mct.exporter.save_quantized_model's .pt,
    or keras_export_model's / model.save's .keras)."""
    import hwquant as mct

    framework = _framework(quantized_model)
    arrays = _load_arrays(data_path, "--data")
    val_arrays = _load_arrays(val_path, "--val-data") if val_path else arrays
    float_net = _load_float_model(float_model)
    quantized = _load_quantized_model(quantized_model)
    tpc = mct.get_target_platform_capabilities(tpc_version, device_type) if tpc_version else None
    config = mct.xquant.XQuantConfig(report_dir, threshold_degrade_layer_ratio=degrade_ratio,
                                     threshold_zscore_outlier_removal=zscore, measure_fixes=measure_fixes,
                                     max_batches=max_batches, html=html, tensorboard=tensorboard,
                                     target_platform_capabilities=tpc)
    prefix = "pytorch" if framework == "pytorch" else "keras"
    name = f"xquant_report_troubleshoot_{prefix}_experimental" if troubleshoot else f"xquant_report_{prefix}_experimental"
    try:
        result = getattr(mct.xquant, name)(float_net, quantized, _batches(arrays, batch_size, False),
                                           _batches(val_arrays, batch_size, True), config)
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


# ---- hwquant tpc: the target platforms ---------------------------------------------------------------------
@main.group()
def tpc() -> None:
    """The target platforms (TPC): list the shipped ones, show one, export one to JSON, check a JSON file."""


def _resolve_tpc(name: str) -> Any:
    """A shipped TPC by 'device:version' (or 'device' for its default version), or a TPC JSON file; bad names are
    usage errors (exit 2) that list the ones that exist."""
    from hwquant.errors import InvalidTPCError
    from hwquant.tpc.platforms import PLATFORMS, get_target_platform_capabilities
    from hwquant.tpc.serialization import load_target_platform_capabilities
    try:
        if name.endswith(".json") or os.path.sep in name:
            return load_target_platform_capabilities(name)
        device, _, version = name.partition(":")
        if device not in PLATFORMS:
            raise InvalidTPCError(f"no target platform '{device}'")
        return get_target_platform_capabilities(version or PLATFORMS[device][0][0], device)
    except InvalidTPCError as e:
        raise click.BadParameter(f"{e}. Shipped: {', '.join(_shipped_names())}; or a TPC JSON file.",
                                 param_hint="NAME") from None


def _shipped_names() -> List[str]:
    from hwquant.tpc.platforms import PLATFORMS
    return [f"{device}:{version}" for device, (versions, _) in PLATFORMS.items() for version in versions]


def _bits(config: Any) -> str:
    """'W8A8'-style bits of one quantization configuration: the kernel's where the set has one, then the output's
    ('A=' where the output keeps its input's quantization, 'Afloat' where it stays float)."""
    kernel = next(iter(config.attr_weights_configs_mapping.values()), None)
    weights = "" if kernel is None else f"W{kernel.weights_n_bits}" if kernel.enable_weights_quantization else "Wfloat"
    if config.enable_activation_quantization:
        return f"{weights}A{config.activation_n_bits}"
    return weights + ("A=" if config.quantization_preserving else "Afloat")


def describe_tpc(t: Any) -> str:
    """What `hwquant tpc show` prints: the defaults, each operator set's options, the fusing patterns."""
    default = t.default_qco.base_config or t.default_qco.quantization_configurations[0]
    lines = [f"{t.name} (platform {t.tpc_platform_type or '-'}, version {t.tpc_minor_version}.{t.tpc_patch_version}"
             f"{', SIMD padding' if t.is_simd_padding else ''})",
             f"default: {_bits(default)}, activations {default.activation_quantization_method.name}, "
             f"SIMD {default.simd_size}", "operator sets:"]
    for op in t.operator_set or ():
        options = op.qc_options.quantization_configurations if op.qc_options else ()
        choices = " | ".join(dict.fromkeys(_bits(c) for c in options)) if options else "the default"
        lines.append(f"  {op.name:28s} {choices}")
    lines.append("fusing patterns:")
    for fusing in t.fusing_patterns or ():
        names = [getattr(g, "name", None) or "/".join(o.name for o in getattr(g, "operators_set", ()))
                 for g in fusing.operator_groups]
        lines.append("  " + " -> ".join(names))
    return "\n".join(lines)


@tpc.command("list")
def tpc_list() -> None:
    """The shipped target platforms, as NAME for the other commands."""
    from hwquant.tpc.platforms import DEFAULT_TPC_VERSION, IMX500_TPC
    for name in _shipped_names():
        click.echo(name + ("  (default)" if name == f"{IMX500_TPC}:{DEFAULT_TPC_VERSION}" else ""))


@tpc.command("show")
@click.argument("name")
def tpc_show(name: str) -> None:
    """What a target platform quantizes and how: NAME is 'device:version' (see `hwquant tpc list`) or a JSON file."""
    click.echo(describe_tpc(_resolve_tpc(name)))


@tpc.command("export")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, writable=True))
def tpc_export(name: str, file: str) -> None:
    """Write a target platform as JSON (edit it, then pass the file to any quantization call or command)."""
    from hwquant.tpc.serialization import export_target_platform_capabilities
    t = _resolve_tpc(name)
    folder = os.path.dirname(os.path.abspath(file))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise click.BadParameter(f"cannot write into '{folder}' (missing or not writable)", param_hint="FILE")
    click.echo(f"wrote {export_target_platform_capabilities(t, file)}")


@tpc.command("check")
@click.argument("file")
def tpc_check(file: str) -> None:
    """Check a TPC JSON file against the schema: exit 0 and a summary if valid, exit 2 and what is wrong if not."""
    from hwquant.errors import InvalidTPCError
    from hwquant.tpc.serialization import load_target_platform_capabilities
    try:
        t = load_target_platform_capabilities(file)
    except InvalidTPCError as e:
        raise click.BadParameter(str(e), param_hint="FILE") from None
    click.echo(f"valid: {file}\n" + describe_tpc(t))


if __name__ == "__main__":  # pragma: no cover
    main()
