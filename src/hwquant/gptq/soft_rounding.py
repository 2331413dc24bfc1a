"""Soft rounding's constants and starting point, for every framework (AdaRound, Nagel et al. 2020):
``h(v) = clip(sigmoid(v) (zeta - gamma) + gamma, 0, 1)``, a rectified sigmoid that reaches 0 and 1 exactly."""
from __future__ import annotations

from typing import Any

import numpy as np

SOFT_ROUNDING_GAMMA = -0.1  # the rectified sigmoid's stretch (AdaRound's values)
SOFT_ROUNDING_ZETA = 1.1


def initial_soft_rounding(remainders: np.ndarray) -> np.ndarray:
    """The ``v`` where ``h(v)`` equals each weight's fractional part on the grid (in [0, 1))."""
    rest = np.asarray(remainders, np.float32)
    return (-np.log((SOFT_ROUNDING_ZETA - SOFT_ROUNDING_GAMMA) / (rest - SOFT_ROUNDING_GAMMA) - 1)).astype(np.float32)


def soft_targets(ops: Any, auxvar: Any) -> Any:
    """h(v): how far up each weight rounds, in [0, 1] (``ops``: the framework's GPTQOps)."""
    return ops.clip(ops.sigmoid(auxvar) * (SOFT_ROUNDING_ZETA - SOFT_ROUNDING_GAMMA) + SOFT_ROUNDING_GAMMA, 0.0, 1.0)


def rounding_regularization(ops: Any, auxvar: Any, beta: float) -> Any:
    """The sum of ``1 - |2h - 1|^beta``: 0 once every h is 0 or 1; a high beta (early) only bites near 0.5."""
    return ops.sum(1 - ops.power(ops.abs(2 * soft_targets(ops, auxvar) - 1), beta))
