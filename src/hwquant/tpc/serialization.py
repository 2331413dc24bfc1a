"""TPC to and from JSON, with the schema version in the file and migration of older versions.

A file is read whole, migrated in memory and validated before anything is returned, so a
malformed, truncated or unknown-version file raises `InvalidTPCError` and nothing is half-loaded.
Writing goes to a temporary file in the same folder that is renamed over the target, so a failed
export leaves no partial file behind.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Union

from pydantic import ValidationError

from hwquant.errors import InvalidTPCError
from hwquant.fileio import atomic_write
from hwquant.tpc.legacy import to_tpc
from hwquant.tpc.schema import SCHEMA_VERSION, TargetPlatformCapabilities


def _migrate_v1_to_v2(data: Dict[str, Any]) -> Dict[str, Any]:
    """Schema 1 (MCT's TargetPlatformModel) lacks `insert_preserving_quantizers` and the fused
    operator's config, which default to none, and spelled the Expand operator set 'Expend', which the
    schema reads as Expand (OperatorsSet)."""
    return {**data, "SCHEMA_VERSION": 2}


# MIGRATIONS[v] turns a schema-v dictionary into a schema-(v+1) one.
MIGRATIONS: Dict[int, Callable[[Dict[str, Any]], Dict[str, Any]]] = {1: _migrate_v1_to_v2}


def tpc_to_dict(tpc: TargetPlatformCapabilities) -> Dict[str, Any]:
    """JSON-ready dictionary of a TPC (enums as their integer / string values)."""
    return tpc.model_dump(mode="json")


def tpc_from_dict(data: Any, source: str = "TPC dictionary") -> TargetPlatformCapabilities:
    """Validate a (possibly older-schema) dictionary into a TPC; `source` names it in errors."""
    if not isinstance(data, dict):
        raise InvalidTPCError(f"{source}: expected a JSON object at the top level, got {type(data).__name__}")
    version = data.get("SCHEMA_VERSION")
    if version is None:
        raise InvalidTPCError(f"{source}: no SCHEMA_VERSION field; a TPC file must say which schema it follows "
                              f"(current: {SCHEMA_VERSION})")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidTPCError(f"{source}: SCHEMA_VERSION={version!r} is not an integer")
    if version > SCHEMA_VERSION:
        raise InvalidTPCError(f"{source}: SCHEMA_VERSION {version} is newer than this hwquant understands "
                              f"({SCHEMA_VERSION}); upgrade hwquant")
    if version < min(MIGRATIONS, default=SCHEMA_VERSION):
        raise InvalidTPCError(f"{source}: SCHEMA_VERSION {version} is unknown; supported: "
                              f"{sorted(set(MIGRATIONS) | {SCHEMA_VERSION})}")
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
    try:
        return TargetPlatformCapabilities.model_validate(data)
    except ValidationError as e:
        raise InvalidTPCError(f"{source} is not a valid TPC:\n{e}") from e


def export_target_platform_capabilities(tpc: TargetPlatformCapabilities, path: Union[str, os.PathLike]) -> Path:
    """Write `tpc` as JSON to `path` atomically; returns the path."""
    if not isinstance(tpc, TargetPlatformCapabilities):
        raise TypeError(f"expected a TargetPlatformCapabilities, got {type(tpc).__name__}")
    text = json.dumps(tpc_to_dict(tpc), indent=2)
    return atomic_write(path, text)


def load_target_platform_capabilities(source: Any) -> TargetPlatformCapabilities:
    """The TPC a facade was given: a JSON file path, or a TPC object (also an older-API
    TargetPlatformModel, a framework attachment, or a TPC object of MCT / edge-mdt-tpc, read through
    its JSON form), returned as the TPC it stands for."""
    if _is_foreign_tpc(source):
        return tpc_from_dict(source.model_dump(mode="json"), source=f"{type(source).__module__} TPC object")
    if not isinstance(source, (str, os.PathLike)):
        try:
            return to_tpc(source)
        except TypeError:
            raise TypeError(f"expected a TargetPlatformCapabilities or the path of a TPC JSON file, "
                            f"got {type(source).__name__}") from None
    path = Path(source)
    if not path.is_file():
        raise InvalidTPCError(f"TPC file '{path}' does not exist (or is not a file)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidTPCError(f"TPC file '{path}' cannot be read: {e}") from e
    return tpc_from_json(text, source=f"TPC file '{path}'")


def _is_foreign_tpc(obj: Any) -> bool:
    """A pydantic TPC from another package that writes the same schema (MCT, edge-mdt-tpc)."""
    return (not isinstance(obj, TargetPlatformCapabilities) and type(obj).__name__ == "TargetPlatformCapabilities"
            and callable(getattr(obj, "model_dump", None)))


def tpc_from_json(text: str, source: str = "TPC JSON") -> TargetPlatformCapabilities:
    """A TPC from JSON text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        hint = " (the file looks truncated)" if e.pos >= len(text.rstrip()) else ""
        raise InvalidTPCError(f"{source} is not valid JSON{hint}: {e.msg} at line {e.lineno} column {e.colno}") from e
    except (TypeError, RecursionError) as e:
        raise InvalidTPCError(f"{source} cannot be parsed: {e}") from e
    return tpc_from_dict(data, source)
