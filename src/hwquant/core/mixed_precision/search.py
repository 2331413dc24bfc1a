"""The bit-width search: an integer linear program (scipy's milp, HiGHS) that picks one candidate
per configurable node, minimising the summed sensitivity while every restricted resource figure
stays within its target; then the refinement step that spends budget left over.

Variables: ``x[i, c]`` in {0, 1} (node i takes candidate c, exactly one per node) and, for BOPs terms
whose kernel and input bits are both configurable, ``y = x[i, c] * x[j, d]`` linearised by
``y <= x[i, c]``, ``y <= x[j, d]``, ``y >= x[i, c] + x[j, d] - 1``.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from hwquant.core.config import RUTarget
from hwquant.core.mixed_precision.resources import ResourceModel, Row


def _dense(coeffs: Dict[int, float], n: int) -> np.ndarray:
    row = np.zeros(n)
    for k, v in coeffs.items():
        row[k] += v
    return row


class _Program:
    def __init__(self, model: ResourceModel):
        self.model = model
        self.vars = [(i, c) for i, n in enumerate(model.nodes) for c in range(len(n.candidates))]
        self.col = {v: k for k, v in enumerate(self.vars)}
        pairs = sorted({p for rows in model.rows.values() for r in rows for p in r.pairs})
        self.pair_col = {p: len(self.vars) + k for k, p in enumerate(pairs)}
        self.n = len(self.vars) + len(pairs)
        self.A: List[np.ndarray] = []
        self.lo: List[float] = []
        self.hi: List[float] = []
        for i, node in enumerate(model.nodes):  # one candidate per node
            self._add({self.col[(i, c)]: 1.0 for c in range(len(node.candidates))}, 1.0, 1.0)
        for (a, b), k in self.pair_col.items():
            self._add({k: 1.0, self.col[a]: -1.0}, -np.inf, 0.0)
            self._add({k: 1.0, self.col[b]: -1.0}, -np.inf, 0.0)
            self._add({k: 1.0, self.col[a]: -1.0, self.col[b]: -1.0}, -1.0, np.inf)

    def _add(self, coeffs: Dict[int, float], lo: float, hi: float) -> None:
        self.A.append(_dense(coeffs, self.n))
        self.lo.append(lo)
        self.hi.append(hi)

    def row_coeffs(self, row: Row) -> Dict[int, float]:
        coeffs = {self.col[v]: c for v, c in row.linear.items()}
        for p, c in row.pairs.items():
            coeffs[self.pair_col[p]] = coeffs.get(self.pair_col[p], 0.0) + c
        return coeffs

    def solve(self, objective: np.ndarray, extra: Sequence[Tuple[Dict[int, float], float, float]] = (),
              n: Optional[int] = None) -> Optional[np.ndarray]:
        n = n or self.n
        A = [np.pad(r, (0, n - len(r))) for r in self.A]
        lo, hi = list(self.lo), list(self.hi)
        for coeffs, l, h in extra:
            A.append(_dense(coeffs, n)), lo.append(l), hi.append(h)
        integrality = np.zeros(n)
        integrality[:len(self.vars)] = 1
        upper = np.ones(n)
        upper[self.n:] = np.inf
        res = milp(objective, constraints=LinearConstraint(np.array(A), lo, hi), integrality=integrality,
                   bounds=Bounds(np.zeros(n), upper))
        return res.x if res.status == 0 else None

    def choice(self, x: np.ndarray) -> List[int]:
        out = [0] * len(self.model.nodes)
        for (i, c), k in self.col.items():
            if x[k] > 0.5:
                out[i] = c
        return out


def minimum(model: ResourceModel, target: RUTarget) -> float:
    """The smallest figure any choice reaches for `target` (the max over its rows, minimised)."""
    prog = _Program(model)
    z = prog.n  # one more (continuous) variable: the figure itself
    extra = []
    for row in model.rows[target]:
        coeffs = prog.row_coeffs(row)
        coeffs[z] = -1.0
        extra.append((coeffs, -np.inf, -row.constant))
    objective = np.zeros(prog.n + 1)
    objective[z] = 1.0
    x = prog.solve(objective, extra, n=prog.n + 1)
    return model.value(target, prog.choice(x))


def search(model: ResourceModel, sensitivity: Sequence[Sequence[float]], targets: Dict[RUTarget, float]) -> Optional[List[int]]:
    """The choice of least total sensitivity within every target; None when none fits."""
    prog = _Program(model)
    objective = np.zeros(prog.n)
    for (i, c), k in prog.col.items():
        objective[k] = sensitivity[i][c]
    extra = [(prog.row_coeffs(row), -np.inf, limit - row.constant)
             for target, limit in targets.items() for row in model.rows[target]]
    x = prog.solve(objective, extra)
    return None if x is None else prog.choice(x)


def refine(model: ResourceModel, choice: List[int], sensitivity: Sequence[Sequence[float]],
           targets: Dict[RUTarget, float]) -> List[int]:
    """Spend what the targets leave: repeatedly move a node to a less sensitive candidate when the
    result still fits, the largest sensitivity drop first (the program's optimum can leave budget
    unused when its sensitivities tie or are close)."""
    choice = list(choice)
    while True:
        moves = sorted(((sensitivity[i][c] - sensitivity[i][choice[i]], i, c)
                        for i, node in enumerate(model.nodes) for c in range(len(node.candidates))
                        if sensitivity[i][c] < sensitivity[i][choice[i]]))
        for _, i, c in moves:
            trial = choice[:i] + [c] + choice[i + 1:]
            if all(model.value(t, trial) <= limit for t, limit in targets.items()):
                choice = trial
                break
        else:
            return choice
