"""Adam as ``torch.optim.Adam`` computes it, for Keras' training loops whose results should equal PyTorch's
(GPTQ's default optimizers).

Both add epsilon to the root of the second moment, but at different places: torch.optim.Adam to the
bias-corrected root, ``sqrt(v / (1 - beta_2^t)) + eps``; Keras' Adam to the uncorrected one, ``sqrt(v) + eps``.
Early in training ``1 - beta_2^t`` is small (0.001 at the first step), so Keras' epsilon weighs
``1 / sqrt(1 - beta_2^t)`` times more (about 32 times at the first step): a variable whose gradient is near
zero moves much less than under PyTorch. GPTQ trains for few steps and most rounding variables have tiny
gradients, so the rounding learned differed from PyTorch's (MobileNetV2, 4-bit kernels).
"""
from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable("hwquant")
class TorchAdam(keras.optimizers.Adam):
    """``keras.optimizers.Adam`` with epsilon added where ``torch.optim.Adam`` adds it (see the module);
    otherwise the same optimizer (its arguments, its state, its serialization)."""

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:  # (torch's AMSGrad keeps another maximum: not needed here)
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        lr, gradient = ops.cast(learning_rate, dtype), ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        beta_1_power = ops.power(ops.cast(self.beta_1, dtype), step)
        beta_2_power = ops.power(ops.cast(self.beta_2, dtype), step)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(1 - beta_2_power)), self.epsilon)
        self.assign_sub(variable, ops.divide(ops.multiply(m, lr / (1 - beta_1_power)), denominator))
