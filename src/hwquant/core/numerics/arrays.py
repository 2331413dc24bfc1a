"""Small numpy helpers shared by the core's numeric modules."""
from __future__ import annotations

from typing import Any

import numpy as np


def as_float_array(x: Any, what: str) -> np.ndarray:
    """`x` as a numpy float array of at least 32 bits (integers and half floats are widened);
    non-numeric input raises ValueError naming `what`."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise ValueError(f"{what} must be numeric, got dtype {a.dtype}")
    if a.dtype.kind != "f" or a.dtype.itemsize < 4:
        a = a.astype(np.float32)
    return a
