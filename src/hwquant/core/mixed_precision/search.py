"""The bit-width search: an integer linear program (scipy's milp, HiGHS) that picks one candidate
per configurable node, minimising the summed sensitivity while every restricted resource figure
stays within its target; then the refinement step that spends budget left over.

Variables: ``x[i, c]`` in {0, 1} (node i takes candidate c, exactly one per node) and, for BOPs terms
whose kernel and input bits are both configurable, ``y = x[i, c] * x[j, d]`` linearised by
``y <= x[i, c]``, ``y <= x[j, d]``, ``y >= x[i, c] + x[j, d] - 1``. Resource rows are scaled by their
target (coefficients near 1 for the solver), and every choice is checked against the exact figures:
the solver's feasibility tolerance may let a row exceed its target by a few units in 10^7.

Sensitivities are made monotone first: a candidate with at least another's bits on every quantized
part never scores worse than it (more bits do not add error; a measured difference the other way is
the estimate's noise), so that a node whose bits no target constrains ends at its largest candidate.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from hwquant.core.configuration.config import RUTarget
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
        for coeffs, low, high in extra:
            A.append(_dense(coeffs, n))
            lo.append(low)
            hi.append(high)
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


def minimum(model: ResourceModel, target: RUTarget) -> Tuple[float, List[int]]:
    """The smallest figure any choice reaches for `target` (the max over its rows, minimised), and that
    choice."""
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
    if x is None:  # feasible by construction (the figure is a free variable): only a solver failure gets here
        raise RuntimeError(f"the MILP solver found no minimum for {target}")
    choice = prog.choice(x)
    return model.value(target, choice), choice


def fits(model: ResourceModel, choice: Sequence[int], targets: Dict[RUTarget, float]) -> bool:
    """Whether `choice` meets every target, on the exact figures."""
    return all(model.value(t, choice) <= limit for t, limit in targets.items())


def search(model: ResourceModel, sensitivity: Sequence[Sequence[float]], targets: Dict[RUTarget, float],
           retries: int = 3) -> Optional[List[int]]:
    """The choice of least total sensitivity within every target; None when none fits."""
    prog = _Program(model)
    objective = np.zeros(prog.n)
    for (i, c), k in prog.col.items():
        objective[k] = sensitivity[i][c]
    limits = dict(targets)
    for _ in range(retries + 1):
        extra = []
        for target, limit in limits.items():
            scale = max(abs(targets[target]), 1.0)
            for row in model.rows[target]:
                extra.append(({k: v / scale for k, v in prog.row_coeffs(row).items()}, -np.inf,
                              (limit - row.constant) / scale))
        x = prog.solve(objective, extra)
        if x is None:
            return None
        choice = prog.choice(x)
        figures = {t: model.value(t, choice) for t in targets}
        over = {t: figures[t] - limit for t, limit in targets.items() if figures[t] > limit}
        if not over:
            return choice
        for t, excess in over.items():  # within the solver's tolerance, over the target: ask for that much less
            limits[t] -= excess
    return None


def _widths_dominate(a: tuple, b: tuple) -> bool:
    """Bit widths `a` (activation bits or None, {attr: bits}) hold at least `b`'s on every quantized part."""
    (act_a, w_a), (act_b, w_b) = a, b
    if (act_a is None) != (act_b is None) or w_a.keys() != w_b.keys():
        return False
    return (act_a is None or act_a >= act_b) and all(w_a[k] >= w_b[k] for k in w_a)


def monotone(model: ResourceModel, sensitivity: Sequence[Sequence[float]]) -> List[List[float]]:
    """Each candidate's sensitivity at most that of every candidate it dominates in bits."""
    out = []
    for i, node in enumerate(model.nodes):
        widths = [c.bit_widths() for c in node.candidates]
        out.append([min(sensitivity[i][d] for d in range(len(widths)) if _widths_dominate(widths[c], widths[d]))
                    for c in range(len(widths))])
    return out


def refine(model: ResourceModel, choice: List[int], sensitivity: Sequence[Sequence[float]],
           targets: Dict[RUTarget, float]) -> List[int]:
    """Spend what the targets leave: repeatedly move a node to a less sensitive candidate when the
    result still fits, the largest sensitivity drop first; on equal sensitivity, to a candidate with
    more bits (the program's optimum can leave budget unused when sensitivities tie or are close)."""
    choice = list(choice)
    widths = [[c.bit_widths() for c in node.candidates] for node in model.nodes]

    def better(i: int, c: int) -> bool:
        now, new = sensitivity[i][choice[i]], sensitivity[i][c]
        return new < now or (new == now and widths[i][c] != widths[i][choice[i]]
                             and _widths_dominate(widths[i][c], widths[i][choice[i]]))
    while True:
        moves = sorted((sensitivity[i][c] - sensitivity[i][choice[i]], i, c)
                       for i, node in enumerate(model.nodes) for c in range(len(node.candidates)) if better(i, c))
        for _, i, c in moves:
            trial = choice[:i] + [c] + choice[i + 1:]
            if fits(model, trial, targets):
                choice = trial
                break
        else:
            return choice
