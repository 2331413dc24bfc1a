"""How GPTQ's weight quantizers round, for every framework: they learn how each weight of a kernel rounds onto
the PTQ grid (and, with ``quantization_parameter_learning``, the grid's threshold / scale too). Two rounding
types (``RoundingType``), each for symmetric / power-of-two and uniform grids:

- SoftQuantizer (AdaRound, Nagel et al. 2020): ``q = clip(floor(w / s) + h(v) + z)`` with one learned ``v`` per
  weight and ``h(v) = clip(sigmoid(v) (zeta - gamma) + gamma, 0, 1)``, a rectified sigmoid that reaches 0 and 1
  exactly. ``v`` starts where ``h(v)`` equals the fractional part of ``w / s`` (the float weight, clipped to the
  grid); the regulariser pushes every ``h`` to 0 or 1 as its temperature anneals. Out of training ``h`` is
  rounded: the weights are on the grid.
- STE: ``q = clip(round(w / s + d) + z)`` with a learned shift ``d`` per weight, in steps of the grid and bounded
  by ``max_lsbs_change`` (1: a weight moves at most to the neighbouring grid point), the rounding passed
  straight through.

The layer's float weight is fixed: only the rounding variables (``VariableGroup.WEIGHTS``) and, if asked, the
quantization parameters (``VariableGroup.QPARAMS``) train. The formulas below take a framework's GPTQOps.
"""
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
