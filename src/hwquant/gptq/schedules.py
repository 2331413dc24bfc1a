"""Step schedules of GPTQ training (framework-free): the soft-rounding regulariser's temperature and
the quantized fraction of gradual activation quantization both follow a linear annealing."""
from __future__ import annotations

from typing import Callable

# The rounding regulariser's exponent anneals from 20 (only rounding variables close to 0.5 feel it)
# to 2 (every variable is pushed to 0 or 1) after a warm-up of a fifth of the steps (AdaRound).
REGULARIZATION_BETA_START, REGULARIZATION_BETA_END = 20.0, 2.0
REGULARIZATION_WARMUP_FRACTION = 0.2


def linear_annealing(t_start: int, t_end: int, initial: float, target: float) -> Callable[[int], float]:
    """``initial`` until step ``t_start``, then linearly to ``target`` at ``t_end``, then ``target``."""
    if t_end < t_start:
        raise ValueError(f"linear annealing needs t_start <= t_end, got {t_start} > {t_end}")

    def value(step: int) -> float:
        if step <= t_start:
            return initial
        if step >= t_end:
            return target
        return initial + (target - initial) * (step - t_start) / (t_end - t_start)
    return value


def regularization_beta(total_steps: int) -> Callable[[int], float]:
    """The soft-rounding regulariser's exponent at each step of a run of ``total_steps`` steps."""
    return linear_annealing(int(REGULARIZATION_WARMUP_FRACTION * total_steps), total_steps,
                            REGULARIZATION_BETA_START, REGULARIZATION_BETA_END)
