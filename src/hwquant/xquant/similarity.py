"""The similarity of a float tensor and its quantized counterpart, as MCT's xquant computes them: per
batch, then averaged over the batches. SQNR is MCT's ratio (signal power / noise power); the report
shows it in dB too."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict

import numpy as np

from hwquant.xquant.config import CS, MSE, SQNR


def mse(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((x.astype(np.float64) - y) ** 2))


def cosine_similarity(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x.astype(np.float64).ravel(), y.astype(np.float64).ravel()
    norms = np.linalg.norm(x) * np.linalg.norm(y)
    return float(x @ y / max(norms, 1e-8))  # torch's cosine_similarity clamps the norms' product too


def sqnr(x: np.ndarray, y: np.ndarray) -> float:
    noise = float(np.mean((x.astype(np.float64) - y) ** 2))
    signal = float(np.mean(x.astype(np.float64) ** 2))
    return math.inf if noise == 0 else signal / noise


DEFAULT_METRICS: Dict[str, Callable[[np.ndarray, np.ndarray], float]] = {MSE: mse, CS: cosine_similarity, SQNR: sqnr}


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
    """Every default metric of (float x, quantized y), and the user's custom metrics on the framework's own
    tensors (``native``), as MCT hands them. A custom metric that fails or returns a non-number is an error
    that names it."""
    out = {name: fn(x, y) for name, fn in DEFAULT_METRICS.items()}
    for name, fn in custom.items():
        try:
            value = fn(native(x), native(y))
            out[name] = float(value.item() if hasattr(value, "item") else value)
        except Exception as e:
            raise ValueError(f"the custom similarity metric {name!r} failed on tensors of shape {x.shape}: "
                             f"{type(e).__name__}: {e}; it must take (float tensor, quantized tensor) and return a "
                             "number") from e
    return out
