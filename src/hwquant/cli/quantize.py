"""`hwquant quantize`: a float model file and data in, the deployable quantized file out, with a summary of
what was quantized, what it costs and how close it stays to the float model on held-out data."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any, List, Optional, Sequence, Tuple

import click
import numpy as np

from hwquant.cli.inputs import PRESETS, ImageOptions, batches, load_data, load_model, trust_option
from hwquant.cli.quiet import framework_output_option
from hwquant.cli.tpc import resolve_tpc
from hwquant.errors import HwquantError

HOLDOUT_SEED = 0


def _floats(text: Optional[str], what: str) -> Optional[Tuple[float, ...]]:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise click.BadParameter(f"'{text}': give numbers separated by commas, e.g. 0.485,0.456,0.406",
                                 param_hint=what) from None


def image_options(preset: Optional[str], resize: Optional[int], size: Optional[str], crop: Optional[int],
                  mean: Optional[str], std: Optional[str], scale: Optional[float], grayscale: bool) -> ImageOptions:
    """The preset's options, overridden by those given."""
    base = PRESETS[preset or "unit"]
    wh = None
    if size is not None:
        w, _, h = size.lower().partition("x")
        if not (w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0):
            raise click.BadParameter(f"'{size}': give WIDTHxHEIGHT, e.g. 224x224", param_hint="--size")
        wh = (int(w), int(h))
    return ImageOptions(resize=resize if resize is not None else (None if wh else base.resize),
                        size=wh, crop=crop if crop is not None else (None if wh else base.crop),
                        scale=scale if scale is not None else base.scale,
                        mean=_floats(mean, "--mean") or base.mean, std=_floats(std, "--std") or base.std,
                        grayscale=grayscale)


def split_holdout(arrays: List[np.ndarray], fraction: float) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """(calibration, held-out): a seeded shuffle, then the last `fraction` of the samples held out."""
    n = len(arrays[0])
    held = int(round(n * fraction))
    if held >= n:
        raise click.BadParameter(f"--holdout {fraction} leaves no calibration samples of {n}", param_hint="--holdout")
    order = np.random.default_rng(HOLDOUT_SEED).permutation(n)
    calibration, heldout = np.sort(order[:n - held]), np.sort(order[n - held:])
    return [a[calibration] for a in arrays], [a[heldout] for a in arrays]


def check_out(out: str, fw: ModuleType, fmt: str) -> str:
    """The --out path, checked before any long work: a suffix the framework exports, a writable folder."""
    suffix = Path(out).suffix
    if suffix not in fw.EXPORTS:
        known = "; ".join(f"{s}: {what}" for s, what in fw.EXPORTS.items())
        raise click.BadParameter(f"'{out}': a {fw.NAME} model exports to {known}", param_hint="--out")
    problem = fw.export_problem(suffix)
    if problem:
        raise click.BadParameter(problem, param_hint="--out")
    if fw.NAME == "keras" and fmt == "int8":
        raise click.BadParameter("a Keras model's .onnx file is QuantizeLinear / DequantizeLinear (qdq); its fully "
                                 "integer file is .tflite", param_hint="--format")
    if fmt != "mctq" and suffix != ".onnx":
        raise click.BadParameter(f"--format {fmt} applies to .onnx files only", param_hint="--format")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise click.BadParameter(f"cannot write into '{folder}' (missing or not writable)", param_hint="--out")
    return out


def _check_bits(tpc: Any, bits: Optional[int], kind: str) -> None:
    """Refuse a bit width no option of the target platform offers (the chip would not run it)."""
    if bits is None:
        return
    options = [c for s in tpc.operator_set or () if s.qc_options for c in s.qc_options.quantization_configurations]
    options += list(tpc.default_qco.quantization_configurations)
    offered = sorted({c.activation_n_bits for c in options} if kind == "activation" else
                     {w.weights_n_bits for c in options for w in c.attr_weights_configs_mapping.values()})
    if bits not in offered:
        raise click.BadParameter(f"{tpc.name} offers {kind} bit widths {', '.join(map(str, offered))}, not {bits}",
                                 param_hint=f"--{kind}-bits")


def peak_memory_bytes() -> int:
    """This process's peak resident memory (VmHWM: its own, unlike ru_maxrss, which a process inherits
    across exec)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def predict_all(fw: ModuleType, model: Any, arrays: Sequence[np.ndarray], batch_size: int, desc: str) -> np.ndarray:
    """The model's first output on every sample, in batches (the peak memory stays that of one batch)."""
    from hwquant.logger import progress
    parts = [fw.predict(model, [a[i:i + batch_size] for a in arrays])[0]
             for i in progress(range(0, len(arrays[0]), batch_size), desc)]
    return np.concatenate(parts)


def similarity(float_out: np.ndarray, quantized_out: np.ndarray) -> Tuple[float, Optional[float]]:
    """(output SQNR in dB, top-1 agreement or None where the output is not (samples, classes))."""
    f, q = float_out.astype(np.float64), quantized_out.astype(np.float64)
    noise = float(((f - q) ** 2).sum())
    sqnr = math.inf if noise == 0 else 10 * math.log10(float((f ** 2).sum()) / noise)
    agreement = float((f.argmax(1) == q.argmax(1)).mean()) if f.ndim == 2 and f.shape[1] > 1 else None
    return sqnr, agreement


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def _memory_line(label: str, quantized: float, float_: float, target: Optional[float]) -> str:
    line = f"{label:13s}{_mb(quantized)}"
    if float_ > 0:
        line += f" (float: {_mb(float_)}, {float_ / quantized:.1f}x smaller)" if quantized > 0 else \
            f" (float: {_mb(float_)})"
    if target is not None and math.isfinite(target):
        line += f"; target {_mb(target)}: {'met' if quantized <= target * (1 + 1e-9) else 'NOT met'}"
    return line


@click.command(short_help="Quantize a model for a target platform; write the deployable file.")
@click.argument("model")
@click.option("--data", "data_spec", required=True, metavar="DATA",
              help="Representative inputs: a folder of images (see the image options), a .npy / .npz file (one array "
                   "per model input, samples first) or 'module:callable' yielding batches.")
@click.option("--out", required=True, metavar="FILE",
              help="What to write, by suffix. PyTorch: .onnx (MCTQ for the IMX500 converter; --format qdq / int8 for "
                   "standard QuantizeLinear / DequantizeLinear), .torchscript, .pt (hwquant's saved model). Keras: "
                   ".keras, .tflite (fully integer; TensorFlow backend), .onnx.")
@click.option("--tpc", "tpc_name", default="imx500", show_default=True, metavar="NAME",
              help="Target platform: 'device:version' (`hwquant tpc list`) or a TPC JSON file.")
@click.option("--format", "fmt", type=click.Choice(["mctq", "qdq", "int8"]), default="mctq", show_default=True,
              help="How quantization appears in an .onnx file of a PyTorch model.")
@click.option("--val-data", "val_spec", metavar="DATA",
              help="Held-out inputs to measure the quantized model on (same forms as --data; default: --holdout of "
                   "--data, not used for calibration).")
@click.option("--holdout", default=0.2, show_default=True, type=click.FloatRange(0, 1, max_open=True),
              help="Fraction of --data held out from calibration to measure on, when --val-data is not given.")
@click.option("--gptq", is_flag=True, help="Gradient-based PTQ: fit the rounding of the weights to the float model "
                                           "(slower; better at 4 bits and below).")
@click.option("--gptq-epochs", default=5, show_default=True, type=click.IntRange(min=1), help="GPTQ epochs.")
@click.option("--weights-memory", type=click.FloatRange(0, 1, min_open=True), metavar="FRACTION",
              help="Mixed precision: fit the weights into this fraction of their memory at the platform's base bit "
                   "widths (e.g. 0.75).")
@click.option("--activation-memory", type=click.FloatRange(0, 1, min_open=True), metavar="FRACTION",
              help="Mixed precision: fit the largest set of live activations into this fraction of its memory at the "
                   "base bit widths.")
@click.option("--activation-bits", type=click.IntRange(2, 16), metavar="N",
              help="Quantize every activation to N bits (one of the widths the platform offers, e.g. 16 on imx500:4.0).")
@click.option("--weights-bits", type=click.IntRange(2, 16), metavar="N",
              help="Quantize every kernel to N bits (one of the widths the platform offers).")
@click.option("--report", "report_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Also write the troubleshooting report (report.html: which layers lose accuracy and the fixes, "
                   "measured) into DIR.")
@click.option("--preset", type=click.Choice(sorted(PRESETS)),
              help="Image preprocessing: imagenet (short side 256, centre crop 224, ImageNet mean / std), inception "
                   "(342 / 299, [-1, 1]), unit ([0, 1], the default), raw (0..255).")
@click.option("--resize", type=click.IntRange(min=1), metavar="N", help="Resize images' short side to N pixels.")
@click.option("--size", metavar="WxH", help="Resize images to exactly WIDTHxHEIGHT.")
@click.option("--crop", type=click.IntRange(min=1), metavar="N", help="Centre-crop images to NxN (after resizing).")
@click.option("--mean", metavar="M[,M,M]", help="Per-channel mean subtracted after scaling (default: the preset's).")
@click.option("--std", metavar="S[,S,S]", help="Per-channel standard deviation divided by (default: the preset's).")
@click.option("--scale", type=float, help="Factor applied to 0..255 pixels first (default 1/255; raw: 1).")
@click.option("--grayscale", is_flag=True, help="Read images as one channel.")
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1),
              help="Samples per batch, in calibration and evaluation (larger: more memory, not faster on a CPU).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars and stage lines; print the summary only.")
@trust_option
@framework_output_option
def quantize(model: str, data_spec: str, out: str, tpc_name: str, fmt: str, val_spec: Optional[str], holdout: float,
             gptq: bool, gptq_epochs: int, weights_memory: Optional[float], activation_memory: Optional[float],
             activation_bits: Optional[int], weights_bits: Optional[int], report_dir: Optional[str],
             preset: Optional[str], resize: Optional[int], size: Optional[str], crop: Optional[int], mean: Optional[str],
             std: Optional[str], scale: Optional[float], grayscale: bool, batch_size: int, quiet: bool,
             trust_model_file: bool) -> None:
    """Quantize MODEL for a target platform and write the deployable file --out.

    MODEL: a torch.export program (.pt2), a TorchScript file or an ONNX model (both converted to PyTorch through
    onnx2torch), a whole pickled module (torch.save(model): torch.nn and torchvision layers are read, anything else
    the pickle names is refused unless --trust-model-file), a Keras .keras / .h5 file (Lambda layers refused unless
    --trust-model-file), or 'package.module:function' / 'file.py:function' returning the float model (PyTorch or
    Keras).

    \b
    Example (MobileNetV2 for the IMX500, images from a folder):
      hwquant quantize my_models.py:mobilenet_v2 --data images/ --preset imagenet --tpc imx500:4.0 --out mnv2.onnx
    """
    import hwquant as mct
    from hwquant.logger import set_progress_bars

    started = time.perf_counter()
    set_progress_bars(not quiet)

    def stage(text: str) -> None:
        if not quiet:
            click.echo(text, err=True)

    tpc = resolve_tpc(tpc_name, "--tpc")
    _check_bits(tpc, activation_bits, "activation")
    _check_bits(tpc, weights_bits, "weights")
    options = image_options(preset, resize, size, crop, mean, std, scale, grayscale)
    stage(f"reading the model {model}")
    fw, float_model = load_model(model, trust=trust_model_file)
    check_out(out, fw, fmt)
    if report_dir is not None and os.path.exists(report_dir) and not os.path.isdir(report_dir):
        raise click.BadParameter(f"'{report_dir}' exists and is not a folder", param_hint="--report")
    stage(f"reading the data {data_spec}")
    arrays = load_data(data_spec, options, fw.CHANNELS_LAST)
    if val_spec is not None:
        calibration, heldout = arrays, load_data(val_spec, options, fw.CHANNELS_LAST, "--val-data")
    elif holdout > 0:
        calibration, heldout = split_holdout(arrays, holdout)
    else:
        calibration, heldout = arrays, []
    notes: List[str] = []
    try:
        float_model, converted = fw.prepare_model(float_model, [a[:batch_size] for a in calibration])
    except HwquantError as e:
        raise click.BadParameter(str(e), param_hint="MODEL") from None
    if converted:
        notes.append(converted)
        stage("note: " + converted)
    fixed = fw.fixed_batch_size(float_model)
    if fixed is not None:
        if len(calibration[0]) < fixed:
            raise click.BadParameter(f"the model takes batches of exactly {fixed} samples (exported with a fixed "
                                     f"batch) and --data holds {len(calibration[0])} for calibration; export it with "
                                     "a free batch (torch.export's dynamic_shapes) or give more data",
                                     param_hint="MODEL")
        notes.append(f"the model takes batches of exactly {fixed} samples (exported with a fixed batch): it ran in "
                     f"batches of {fixed}, the samples beyond the last whole batch left out")
        stage("note: " + notes[-1])
        batch_size = fixed
        calibration = [a[:len(a) - len(a) % fixed] for a in calibration]
        heldout = [a[:len(a) - len(a) % fixed] for a in heldout] if heldout and len(heldout[0]) >= fixed else []
    representative = batches(calibration, batch_size)

    prefix = fw.NAME
    overrides: dict = {k: v for k, v in (("activation_n_bits", activation_bits), ("weights_n_bits", weights_bits))
                       if v is not None}  # the seed's overrides of the TPC's bit widths
    config = mct.core.QuantizationConfig(**overrides)
    mixed = weights_memory is not None or activation_memory is not None
    core_config = mct.core.CoreConfig(quantization_config=config,
                                      mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig()
                                      if mixed else None)
    try:
        target = None
        if mixed:
            stage("measuring the memory at the base bit widths (for the mixed-precision target)")
            full = getattr(mct.core, f"{prefix}_resource_utilization_data")(float_model, representative, core_config,
                                                                             tpc)
            target = mct.core.ResourceUtilization(
                **({"weights_memory": full.weights_memory * weights_memory} if weights_memory else {}),
                **({"activation_memory": full.activation_memory * activation_memory} if activation_memory else {}))
        stage(f"quantizing for {tpc.name} on {len(calibration[0])} samples" + (" (GPTQ)" if gptq else ""))
        quantize_started = time.perf_counter()
        common = dict(target_resource_utilization=target, core_config=core_config, target_platform_capabilities=tpc)
        if gptq:
            gptq_config = getattr(mct.gptq, f"get_{prefix}_gptq_config")(n_epochs=gptq_epochs)
            quantized, info = getattr(mct.gptq, f"{prefix}_gradient_post_training_quantization")(
                float_model, representative, gptq_config=gptq_config, **common)
        else:
            quantized, info = getattr(mct.ptq, f"{prefix}_post_training_quantization")(
                float_model, representative, **common)
        quantize_seconds = time.perf_counter() - quantize_started
        measured = None
        if len(heldout):
            float_out = predict_all(fw, float_model, heldout, batch_size, "Float model on the held-out data")
            quantized_out = predict_all(fw, quantized, heldout, batch_size, "Quantized model on the held-out data")
            measured = similarity(float_out, quantized_out)
        stage(f"writing {out}")
        written = fw.export(quantized, out, representative, fmt)
        if report_dir is not None:
            stage(f"writing the troubleshooting report into {report_dir}")
            xconfig = mct.xquant.XQuantConfig(report_dir, target_platform_capabilities=tpc, tensorboard=False)
            getattr(mct.xquant, f"xquant_report_troubleshoot_{prefix}_experimental")(
                float_model, quantized, representative, batches(heldout or calibration, batch_size, labels=True),
                xconfig)
    except HwquantError as e:
        raise click.ClickException(str(e)) from e
    except Exception as e:  # noqa: BLE001 - the model's or a library's own failure: one line, the traceback on request
        if os.environ.get("HWQUANT_DEBUG"):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise click.ClickException(f"{type(e).__name__}: {first} (set HWQUANT_DEBUG=1 for the traceback)") from e

    layers = fw.quantized_layers(quantized)
    lines = [f"{type(float_model).__name__} ({fw.NAME}) for {tpc.name}: {len(layers)} layers' weights quantized, "
             f"{len(info.float_layers)} left float" + (f" ({', '.join(list(info.float_layers)[:4])}"
                                                        f"{', ...' if len(info.float_layers) > 4 else ''})"
                                                        if info.float_layers else "")]
    lines.append(f"{'quantization':13s}{quantize_seconds:.1f} s (the whole command {time.perf_counter() - started:.1f}"
                 f" s, peak memory {_mb(peak_memory_bytes())})")
    final, float_ru = info.resource_utilization, info.float_resource_utilization
    if final is not None and float_ru is not None:
        lines.append(_memory_line("weights", final.weights_memory, float_ru.weights_memory,
                                  target.weights_memory if target else None))
        lines.append(_memory_line("activations", final.activation_memory, float_ru.activation_memory,
                                  target.activation_memory if target else None))
    if info.mixed_precision_bit_widths:
        counts: dict = {}
        for _, (_, kernel) in info.mixed_precision_bit_widths.items():
            for bits in kernel.values():
                counts[bits] = counts.get(bits, 0) + 1
        lines.append(f"{'bit widths':13s}" + ", ".join(f"{n} kernels at {b} bits" for b, n in sorted(counts.items())))
    if measured is not None:
        sqnr, agreement = measured
        lines.append(f"{'held-out':13s}{len(heldout[0])} samples: output SQNR {sqnr:.1f} dB"
                     + (f", top-1 agreement with float {100 * agreement:.1f} %" if agreement is not None else
                        " (top-1 agreement: the output is not (samples, classes))"))
    elif fixed is not None and (holdout > 0 or val_spec is not None):
        lines.append(f"{'held-out':13s}none (fewer held-out samples than one batch of {fixed}): the quantized model "
                     "was not measured")
    else:
        lines.append(f"{'held-out':13s}none (--holdout 0 and no --val-data): the quantized model was not measured")
    lines.append(f"{'wrote':13s}{written} ({_mb(os.path.getsize(written))})")
    if report_dir is not None:
        lines.append(f"{'report':13s}{os.path.join(report_dir, 'report.html')}")
    lines += [f"{'note':13s}{note}" for note in notes]
    click.echo("\n".join(lines))
