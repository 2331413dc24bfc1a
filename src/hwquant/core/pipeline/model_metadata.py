"""What a quantized model says about how it was made: the toolkit version, the target platform
and the quantization settings. The facades attach it to the model they return (attribute
``hwquant_metadata``) and every exporter writes it into the file, so a deployed file can be traced
back to its settings."""
from __future__ import annotations

import json
import math
from enum import Enum
from typing import Any, Dict

METADATA_ATTR = "hwquant_metadata"


def _plain(value: Any) -> Any:
    """A JSON-safe rendering: enums by name, infinities as strings, callables and objects by repr."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def quantization_metadata(tpc: Any, core_config: Any, framework: str, method: str, state: Any = None) -> Dict[str, Any]:
    """The metadata dict (JSON-safe) of a model quantized with ``tpc`` and ``core_config``; with the
    pipeline's ``state``, also its resource targets and what the pipeline did (the troubleshooting report
    reads them back)."""
    from hwquant.version import __version__

    qc = core_config.quantization_config
    settings = {name: _plain(getattr(qc, name)) for name in type(qc).model_fields}
    # MCT's TPC keys, as strings; one the TPC leaves unset is left out (the IMX500 converter
    # checks the platform type and the minor version where they are present).
    tpc_keys = {"tpc_name": tpc.name, "tpc_platform_type": tpc.tpc_platform_type,
                "tpc_minor_version": tpc.tpc_minor_version, "tpc_patch_version": tpc.tpc_patch_version,
                "tpc_schema": tpc.SCHEMA_VERSION}
    return {
        "hwquant_version": __version__,
        "framework": framework,
        "method": method,
        **{k: str(v) for k, v in tpc_keys.items() if v is not None},
        "tpc_version": tpc.version,
        "quantization_config": settings,
        **({} if state is None else run_record(state)),
    }


def run_record(state: Any) -> Dict[str, Any]:
    """The resource targets of the run (finite ones) and the pipeline report's figures."""
    out: Dict[str, Any] = {}
    target = getattr(state, "target", None)
    if target is not None and target.is_any_restricted():
        out["target_resource_utilization"] = {name: getattr(target, name) for name in type(target).model_fields
                                              if math.isfinite(getattr(target, name))}
    report = state.report
    out["pipeline"] = _plain({
        "folded_batch_norms": report.folded_batch_norms, "linear_collapsed": report.linear_collapsed,
        "residual_collapsed": report.residual_collapsed, "relu_bound": report.relu_bound,
        "equalized": report.equalized, "shift_negative": report.shift_negative,
        "bias_corrected": report.bias_corrected, "input_scale": report.input_scale,
        "kept_float_masks": report.kept_float_masks, "float_layers": report.float_layers,
        "mixed_precision_bit_widths": None if report.mixed_precision is None else report.mixed_precision.bit_widths})
    return out


def settings_of(metadata: Dict[str, Any]) -> tuple:
    """(QuantizationConfig, TPC, ResourceUtilization or None, notes) read back from a model's metadata; what
    cannot be read back is said in ``notes`` and left at its default."""
    from hwquant.core.configuration.config import ResourceUtilization
    from hwquant.core.configuration.quantization_config import QuantizationConfig
    from hwquant.tpc.platforms import get_target_platform_capabilities

    notes = []
    fields = QuantizationConfig.model_fields
    settings: Dict[str, Any] = {}
    for name, value in (metadata.get("quantization_config") or {}).items():
        if name not in fields or name == "custom_tpc_opset_to_layer" or value is None:
            continue
        enum = _enum_of(fields[name].annotation)
        try:
            settings[name] = enum[value] if enum is not None and isinstance(value, str) else \
                (float(value) if value in ("inf", "-inf") else value)
        except KeyError:
            notes.append(f"quantization setting {name}={value!r} not understood: left at its default")
    qc = QuantizationConfig(**settings)
    try:
        tpc = get_target_platform_capabilities(metadata["tpc_version"], metadata.get("tpc_platform_type", "imx500"))
    except Exception as e:  # a custom TPC: its name is known, not its content
        tpc = get_target_platform_capabilities()
        notes.append(f"the model's TPC ({metadata.get('tpc_name', '?')}, version {metadata.get('tpc_version', '?')}) "
                     f"is not a shipped one ({type(e).__name__}): the default IMX500 TPC is used to measure fixes; pass "
                     "XQuantConfig(target_platform_capabilities=...)")
    target = metadata.get("target_resource_utilization")
    return qc, tpc, ResourceUtilization(**target) if target else None, notes


def _enum_of(annotation: Any) -> Any:
    """The Enum class inside a field's annotation (Optional / Annotated unwrapped), or None."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return annotation
    for arg in typing.get_args(annotation):
        found = _enum_of(arg)
        if found is not None:
            return found
    return None


def metadata_strings(metadata: Dict[str, Any]) -> Dict[str, str]:
    """Flat string key/values (ONNX metadata_props): nested values as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in metadata.items()}
