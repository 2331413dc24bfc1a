"""Soft rounding's constants and starting point, for every framework (AdaRound, Nagel et al. 2020):
``h(v) = clip(sigmoid(v) (zeta - gamma) + gamma, 0, 1)``, a rectified sigmoid that reaches 0 and 1 exactly."""
from __future__ import annotations

import numpy as np

SOFT_ROUNDING_GAMMA = -0.1  # the rectified sigmoid's stretch (AdaRound's values)
SOFT_ROUNDING_ZETA = 1.1


def initial_soft_rounding(remainders: np.ndarray) -> np.ndarray:
    """The ``v`` where ``h(v)`` equals each weight's fractional part on the grid (in [0, 1))."""
    rest = np.asarray(remainders, np.float32)
    return (-np.log((SOFT_ROUNDING_ZETA - SOFT_ROUNDING_GAMMA) / (rest - SOFT_ROUNDING_GAMMA) - 1)).astype(np.float32)
