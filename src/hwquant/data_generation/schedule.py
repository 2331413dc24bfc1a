"""The learning rate of data generation, framework-free: each framework's optimizer takes the rate this gives
for the step (MCT 2.6.1's schedules: reduce on plateau, halving after ``n_iter / 50`` steps without a relative
improvement of 1e-4, down to 1e-4; the same with the best loss forgotten after each reduction, so a later plateau
is judged on its own; steps of a tenth every third of the run)."""
from __future__ import annotations

import math
from typing import Optional

from hwquant.data_generation.config import SchedulerType

MIN_LR = 1e-4
FACTOR = 0.5
THRESHOLD = 1e-4          # a relative improvement smaller than this is no improvement
STEP_FACTOR = 0.1


class LearningRateSchedule:
    def __init__(self, kind: SchedulerType, initial_lr: float, n_iter: int):
        self.kind, self.lr = kind, float(initial_lr)
        self.patience = int(n_iter / 50)
        self.step_size = max(int(n_iter / 3), 1)
        self.best: Optional[float] = None
        self.bad_steps = 0
        self.steps = 0

    def step(self, loss: float) -> float:
        """After a step whose loss was ``loss``: the rate for the next one."""
        self.steps += 1
        if self.kind == SchedulerType.STEP:
            if self.steps % self.step_size == 0:
                self.lr *= STEP_FACTOR
            return self.lr
        loss = float(loss)
        if self.best is None or (math.isfinite(loss) and loss < self.best * (1 - THRESHOLD)):
            self.best, self.bad_steps = loss, 0
        else:
            self.bad_steps += 1
        if self.bad_steps > self.patience:
            self.lr = max(self.lr * FACTOR, min(MIN_LR, self.lr))
            self.bad_steps = 0
            if self.kind == SchedulerType.REDUCE_ON_PLATEAU_WITH_RESET:
                self.best = None
        return self.lr
