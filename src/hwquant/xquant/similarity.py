"""Similarity bookkeeping: MCT's figures are per batch, averaged over the batches (the default metrics
themselves: analysis.PairSums); SQNR is MCT's ratio (signal power / noise power), shown in dB too."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict

import numpy as np



def in_db(ratio: float) -> float:
    """A power ratio in decibels (inf stays inf; a ratio of 0 is -inf)."""
    if ratio <= 0:
        return -math.inf
    return math.inf if math.isinf(ratio) else 10.0 * math.log10(ratio)


class Averages:
    """Per-key running means of per-batch metric values (MCT averages the batches' values)."""

    def __init__(self) -> None:
        self.sums: Dict[str, Dict[str, float]] = {}
        self.counts: Dict[str, int] = {}

    def add(self, key: str, values: Dict[str, float]) -> None:
        sums = self.sums.setdefault(key, {})
        for metric, v in values.items():
            sums[metric] = sums.get(metric, 0.0) + float(v)
        self.counts[key] = self.counts.get(key, 0) + 1

    def means(self) -> Dict[str, Dict[str, float]]:
        return {key: {m: s / self.counts[key] for m, s in sums.items()} for key, sums in self.sums.items()}


def compare(x: np.ndarray, y: np.ndarray, custom: Dict[str, Callable], native: Callable[[np.ndarray], Any]) -> Dict[str, float]:
    """The user's custom metrics of (float x, quantized y), on the framework's own tensors (``native``), as MCT
    hands them (the default ones come from analysis.PairSums). A custom metric that fails or returns a
    non-number is an error that names it."""
    out: Dict[str, float] = {}
    for name, fn in custom.items():
        try:
            value = fn(native(x), native(y))
            out[name] = float(value.item() if hasattr(value, "item") else value)
        except Exception as e:
            raise ValueError(f"the custom similarity metric {name!r} failed on tensors of shape {x.shape}: "
                             f"{type(e).__name__}: {e}; it must take (float tensor, quantized tensor) and return a "
                             "number") from e
    return out
