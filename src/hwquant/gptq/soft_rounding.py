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

from typing import Any, Tuple

import numpy as np

from hwquant.core.numerics import quant_math

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


class SoftRoundingWeights:
    """A SoftQuantizer's arithmetic, for every framework: the framework's quantizer class gives ``ops`` (its
    GPTQOps), ``auxvar`` (the rounding variables ``v``) and ``grid()`` (the kernel's affine grid)."""
    ops: Any
    auxvar: Any

    def initial_auxvar(self, w: np.ndarray) -> np.ndarray:
        grid = self.grid()  # type: ignore[attr-defined]
        as_numpy = quant_math.AffineGrid(quant_math._to_numpy(grid.scale), quant_math._to_numpy(grid.zero_point),
                                         grid.qmin, grid.qmax, grid.axis)
        return initial_soft_rounding(quant_math.rounding_remainders(w, as_numpy))

    def soft_targets(self) -> Any:
        return soft_targets(self.ops, self.auxvar)

    def rounding_regularization(self, beta: float) -> Any:
        return rounding_regularization(self.ops, self.auxvar, beta)

    def rounded(self, w: Any, hard: bool) -> Any:
        """The kernel ``w`` rounded up by h(v); ``hard``: h rounded to 0 or 1 (out of training)."""
        return quant_math.soft_rounded(w, self.grid(), self.soft_targets(), hard)  # type: ignore[attr-defined]


class STERoundingWeights:
    """An STE GPTQ quantizer's arithmetic, for every framework (``ops``, ``auxvar``: the shifts ``d``,
    ``grid()`` and ``max_lsbs_change`` from the framework's class, which fake-quantizes what ``shifted`` gives
    with the straight-through gradient)."""
    ops: Any
    auxvar: Any
    max_lsbs_change: float

    def initial_auxvar(self, w: np.ndarray) -> np.ndarray:
        return np.zeros_like(w)

    def rounding_regularization(self, beta: float) -> float:
        return 0.0  # (no regulariser: the shift is bounded instead)

    def shifted(self, w: Any) -> Tuple[Any, Any]:
        """(the fixed kernel moved by the learned shift, bounded, in real units; the grid)."""
        grid = self.grid()  # type: ignore[attr-defined]
        w = quant_math.stop_gradient(w)
        shift = self.ops.clip(self.auxvar, -self.max_lsbs_change, self.max_lsbs_change)
        return w + shift * quant_math.stop_gradient(quant_math.per_channel_view(grid.scale, w, grid.axis)), grid
