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


def quantization_metadata(tpc: Any, core_config: Any, framework: str, method: str) -> Dict[str, Any]:
    """The metadata dict (JSON-safe) of a model quantized with ``tpc`` and ``core_config``."""
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
    }


def metadata_strings(metadata: Dict[str, Any]) -> Dict[str, str]:
    """Flat string key/values (ONNX metadata_props): nested values as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in metadata.items()}
