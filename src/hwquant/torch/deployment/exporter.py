"""`mct.exporter.pytorch_export_model`: write a quantized PyTorch model to ONNX (QDQ or MCTQ) or
TorchScript, with the toolkit's metadata in the file. The file is written whole or not at all."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import hwquant.torch.distributed  # noqa: F401 (registers this process's rank: rank 0 alone writes files)
from hwquant.concurrency import framework_call
from hwquant.core.pipeline.model_metadata import metadata_strings
from hwquant.errors import ExportError
from hwquant.exporter.formats import (DEFAULT_ONNX_OPSET_VERSION, MIN_ONNX_OPSET_VERSION,
                                      PytorchExportSerializationFormat, QuantizationFormat, as_format,
                                      check_pytorch_combination)
from hwquant.fileio import atomic_write

log = logging.getLogger("hwquant.exporter")
METADATA_FILE = "hwquant_metadata.json"  # TorchScript archive entry
FLOAT_FORMAT = "FLOAT"  # the metadata's quantization_format of a model exported without quantizers


def _check_path(path: Any, suffixes: tuple) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ExportError(f"save_model_path must be a file path (str or os.PathLike), got {path!r}")
    path = Path(path)
    if path.is_dir():
        raise ExportError(f"save_model_path '{path}' is a folder; give a file name such as '{path / ('model' + suffixes[0])}'")
    if not path.parent.is_dir():
        raise ExportError(f"cannot write '{path}': folder '{path.parent}' does not exist; create it first")
    if not os.access(path.parent, os.W_OK):
        raise ExportError(f"cannot write '{path}': folder '{path.parent}' is not writable")
    if path.suffix.lower() not in suffixes:
        log.warning("exporting to '%s': the usual extension is %s", path, suffixes[0])
    return path


def _example(model: Any, batch: list) -> list:
    """The inputs the tracers run: one sample of the first batch, or the whole batch for a model that
    takes only some batch sizes (a torch.export capture that fixed them). The tracers would fail deep
    inside torch on data the model cannot take: that is said here."""
    import torch

    error: Exception = RuntimeError("no batch")
    for example in ([t[:1] for t in batch], batch):
        try:
            with torch.no_grad():
                model(*example)
            return example
        except Exception as e:  # noqa: BLE001
            error = e
    raise ExportError(f"the model fails on the first batch of repr_dataset (shapes {[tuple(t.shape) for t in batch]}, "
                      f"dtypes {[str(t.dtype) for t in batch]}): {type(error).__name__}: "
                      f"{str(error).splitlines()[0] if str(error) else ''}; give batches shaped like the "
                      "representative data the model was quantized with") from error


def _metadata(model: Any, quantization: QuantizationFormat, serialization: PytorchExportSerializationFormat,
              is_float: bool = False) -> Dict[str, Any]:
    from hwquant.torch.deployment.metadata import read_metadata
    from hwquant.version import __version__

    if is_float:  # a model without quantizers: the file says it is float
        return {**(read_metadata(model) or {"hwquant_version": __version__}), "quantization_format": FLOAT_FORMAT,
                "serialization_format": serialization.name}
    return {**(read_metadata(model) or {}), "quantization_format": quantization.name,
            "serialization_format": serialization.name}


@framework_call
def pytorch_export_model(model: Any, save_model_path: Any, repr_dataset: Callable[[], Any],
                         is_layer_exportable_fn: Optional[Callable[[Any], bool]] = None,
                         serialization_format: Any = PytorchExportSerializationFormat.ONNX,
                         quantization_format: Any = QuantizationFormat.MCTQ,
                         onnx_opset_version: Optional[int] = None,
                         output_names: Optional[List[str]] = None) -> Path:
    """Export a model quantized by hwquant (MCT's signature).

    Args:
        model: the quantized model returned by a hwquant facade (PTQ, GPTQ, QAT finalize). A model without
            quantizers (a float model, e.g. pruned and fine-tuned) is written as a float file, as MCT does, with
            a warning; its metadata says quantization_format FLOAT. INT8 needs a quantized model.
        save_model_path: the file to write (.onnx or .pt); its folder must exist.
        repr_dataset: zero-argument callable yielding lists of input batches (the first batch traces the model).
        is_layer_exportable_fn: called on each top-level layer before anything is traced; a layer it
            refuses (returns False) stops the export. None: `is_pytorch_layer_exportable` (MCT's check).
        serialization_format: PytorchExportSerializationFormat.ONNX or TORCHSCRIPT.
        quantization_format: QuantizationFormat.MCTQ (ONNX custom ops), FAKELY_QUANT (ONNX QDQ with integer
            weights / TorchScript fake quantization) or INT8 (ONNX QDQ, every quantizer within 8 bits).
        onnx_opset_version: ONNX opset (>= 13; 21 for 16-bit activations as integers). None: 17, or 20 for an
            MCTQ file whose model has GELU (the IMX500 converter takes GELU as opset 20's Gelu operator).
        output_names: names of the ONNX graph's outputs, one per model output (default output_0, ...);
            ignored, with a warning, for TorchScript.

    An MCTQ file is written in the forms the IMX500 converter accepts (``torch.imx500_forms``); where the
    converter would still refuse it (an operator the chip lacks, a non-power-of-two activation grid, an
    opset it does not read), a warning says why at export time.

    Returns:
        The path written.
    """
    import torch

    from hwquant.torch.data import RepresentativeData
    from hwquant.torch.deployment.export_model import is_pytorch_layer_exportable, quantizers_of

    if isinstance(is_layer_exportable_fn, (PytorchExportSerializationFormat, QuantizationFormat)) or \
            (is_layer_exportable_fn is not None and not callable(is_layer_exportable_fn)):
        raise ExportError(f"is_layer_exportable_fn must be a function of a layer, got {is_layer_exportable_fn!r}; "
                          "the fourth positional argument is is_layer_exportable_fn (MCT's order): pass the formats "
                          "by keyword, serialization_format=..., quantization_format=...")
    serialization = as_format(serialization_format, PytorchExportSerializationFormat, "serialization_format")
    quantization = as_format(quantization_format, QuantizationFormat, "quantization_format")
    check_pytorch_combination(serialization, quantization)
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"model must be a torch.nn.Module quantized by hwquant, got {type(model).__name__}")
    quantizers = quantizers_of(model)
    is_float = not quantizers
    if is_float and quantization == QuantizationFormat.INT8:
        raise ExportError(f"the {type(model).__name__} model holds no hwquant quantizers (it is not quantized): an INT8 "
                          "file needs a quantized model; quantize it first with mct.ptq.pytorch_post_training_quantization"
                          " (or GPTQ / QAT finalize), or export it as a float file with quantization_format=MCTQ or "
                          "FAKELY_QUANT")
    refused = [name for name, layer in model.named_children()
               if (is_layer_exportable_fn or is_pytorch_layer_exportable)(layer) is False]
    if refused:
        raise ExportError(f"is_layer_exportable_fn refused the layers {refused[:8]}; nothing was written")
    onnx_out = serialization == PytorchExportSerializationFormat.ONNX
    if output_names is not None and not onnx_out:
        log.warning("output_names only name ONNX outputs; ignored for %s", serialization.name)
    if output_names is not None and (isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names)):
        raise ExportError(f"output_names must be a list of strings, got {output_names!r}")
    if onnx_out and onnx_opset_version is not None and (isinstance(onnx_opset_version, bool)
                                                        or not isinstance(onnx_opset_version, int)
                                                        or onnx_opset_version < MIN_ONNX_OPSET_VERSION):
        raise ExportError(f"onnx_opset_version must be an int >= {MIN_ONNX_OPSET_VERSION} (per-axis "
                          f"QuantizeLinear), got {onnx_opset_version!r}")
    if quantization == QuantizationFormat.INT8:
        wide = [f"{name} ({q.num_bits}-bit {q.method.name})" for name, q in quantizers.items()
                if q.num_bits > 8 or q.method.name.startswith("LUT")]
        if wide:
            raise ExportError(f"INT8 export needs every quantizer within 8 bits on a uniform grid; these are not: "
                              f"{wide[:8]}; export with quantization_format=FAKELY_QUANT instead")
    path = _check_path(save_model_path, (".onnx",) if onnx_out else (".pt", ".pth", ".torchscript"))
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    example = _example(model, RepresentativeData(repr_dataset, device=device, model=model).first_batch())
    meta = _metadata(model, quantization, serialization, is_float)
    if onnx_out:
        data = _onnx_bytes(model, example, quantization, onnx_opset_version, meta, output_names, is_float)
    else:
        from hwquant.torch.deployment.export_model import to_torchscript

        data = to_torchscript(model, example, {METADATA_FILE: json.dumps(meta, sort_keys=True)})
    try:
        atomic_write(path, data)
    except OSError as e:  # a read-only folder or file system, a full disk: nothing was left behind
        raise ExportError(f"cannot write '{path}': {e.strerror or e}; choose a writable folder") from e
    if is_float:
        log.warning("the %s model holds no hwquant quantizers: it is not quantized, and the %s file written to %s is "
                    "float (quantize it first, e.g. with mct.ptq.pytorch_post_training_quantization, for a quantized "
                    "file)", type(model).__name__, serialization.name, path)
    log.info("exported %s (%s, %s) to %s: %.1f KiB", type(model).__name__, serialization.name,
             FLOAT_FORMAT if is_float else quantization.name, path, len(data) / 1024)
    return path


def _check_imx500(proto: Any, meta: Dict[str, Any]) -> None:
    """Warn, before anyone runs the converter, when the IMX500 converter would refuse an MCTQ file.
    The file is still written: MCTQ also serves simulation in ONNX Runtime, where such a file runs."""
    from hwquant.exporter.imx500 import converter_problems

    problems = converter_problems(proto, meta.get("tpc_minor_version"))
    if problems:
        log.warning("the IMX500 converter will refuse this MCTQ file (quantized for TPC '%s'): %s",
                    meta.get("tpc_name"), "; ".join(problems))


def _onnx_bytes(model: Any, example: list, quantization: QuantizationFormat, opset: Optional[int],
                meta: Dict[str, Any], output_names: Optional[List[str]], is_float: bool = False) -> bytes:
    import onnx

    from hwquant.exporter.imx500 import GELU_OPSET, uses_erf
    from hwquant.exporter.onnx_int8 import optimize_for_integer_kernels
    from hwquant.exporter.onnx_lowering import lower_markers_to_mctq, lower_markers_to_qdq
    from hwquant.torch.deployment.export_model import to_onnx

    mctq = quantization == QuantizationFormat.MCTQ and not is_float  # (a float model: the plain float graph)
    proto = to_onnx(model, example, opset or DEFAULT_ONNX_OPSET_VERSION, imx500_forms=mctq, output_names=output_names)
    if mctq and opset is None and uses_erf(proto) and DEFAULT_ONNX_OPSET_VERSION < GELU_OPSET:
        log.info("the model has GELU: exporting MCTQ at opset %d, where GELU is the one Gelu operator the IMX500 "
                 "converter takes (below it, Erf)", GELU_OPSET)
        proto = to_onnx(model, example, GELU_OPSET, imx500_forms=True, output_names=output_names)
    if is_float:
        pass  # no quantizer markers to lower
    elif mctq:
        lower_markers_to_mctq(proto)
        _check_imx500(proto, meta)
    else:
        lower_markers_to_qdq(proto)
        counts = optimize_for_integer_kernels(proto)
        log.info("integer-kernel rewrites: %s", counts)
    onnx.helper.set_model_props(proto, metadata_strings(meta))
    # The producer stays what torch.onnx wrote ("pytorch", torch's version): the IMX500 converter
    # refuses any other. hwquant's own identity and settings are in the metadata properties.
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:  # a bug of ours, not the user's: say so plainly
        raise ExportError(f"the exported ONNX graph does not validate ({e}); please report this model") from e
    return proto.SerializeToString()
