"""Value checks shared by the configuration objects and the network-editor actions.

They refuse look-alikes that lax conversion would accept ("8", 8.0, "yes", a member of another
IntEnum with the same value): such values usually hide a mistake (a wrong argument order, a wrong
enum). Each raises ValueError saying what was expected and what was given.
"""
from __future__ import annotations

import math
import numbers
from enum import Enum
from typing import Any, cast


def as_bool(v: Any) -> bool:
    if isinstance(v, bool) or type(v).__name__ == "bool_":  # numpy.bool_ without importing numpy
        return bool(v)
    raise ValueError(f"expected True or False, got {v!r}")


def as_int(v: Any) -> int:
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    raise ValueError(f"expected an integer, got {v!r}")


def as_real(v: Any) -> float:
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        v = float(v)
        if math.isnan(v):
            raise ValueError("expected a number, got NaN")
        return v
    raise ValueError(f"expected a number, got {v!r}")


def as_enum(enum_cls: type, v: Any) -> Any:
    """A member of `enum_cls` given as itself or its value; members of other enums are refused (an
    IntEnum of another kind would slip through by value, e.g. QuantizationMethod.SYMMETRIC == 2 == MAE)."""
    if isinstance(v, enum_cls):
        return v
    valid = ", ".join(f"{m.name}={m.value!r}" for m in cast("type[Enum]", enum_cls))
    if isinstance(v, (Enum, bool)):
        raise ValueError(f"expected a {enum_cls.__name__} member, got {v!r} (valid: {valid})")
    try:
        return enum_cls(v)
    except (ValueError, TypeError):
        raise ValueError(f"expected a {enum_cls.__name__} member or its value, got {v!r} (valid: {valid})") from None
