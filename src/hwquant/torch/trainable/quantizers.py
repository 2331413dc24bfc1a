"""The trainable quantizers: power-of-two / symmetric and uniform, for weights and activations,
trained with STE or LSQ (see ``TrainingMethod``).

Learned parameters: symmetric and power-of-two quantizers learn the threshold (the power of two is
taken in the forward pass, passed straight through in the backward pass); uniform quantizers learn
the scale and a float zero point (rounded in the forward pass), the LSQ+ parameterisation, so the
PTQ grid is the exact starting point and the learned grid converts exactly to range_min / range_max.

Defaults, as in MCT: STE weight quantizers keep the PTQ parameters fixed (the weights learn); STE
activation quantizers and every LSQ quantizer learn theirs (``freeze_quant_params`` overrides).
"""
from __future__ import annotations

from typing import Any, Dict

import numpy as np
import torch

from hwquant.constants import MIN_THRESHOLD, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core import quant_math
from hwquant.torch.trainable.base import BasePytorchActivationTrainableQuantizer, BasePytorchTrainableQuantizer
from hwquant.torch.trainable.fake_quant import affine_fake_quantize, lsq_gradient_factor, straight_through
from hwquant.tpc.enums import QuantizationMethod
from hwquant.trainable_infrastructure.common import QuantizationTarget, TrainingMethod, mark_quantizer

_SYMMETRIC = [QuantizationMethod.POWER_OF_TWO, QuantizationMethod.SYMMETRIC]
_UNIFORM = [QuantizationMethod.UNIFORM]


class _TrainableAffineQuantizer(BasePytorchTrainableQuantizer):
    """What symmetric and uniform quantizers share: the forward pass through the affine grid."""

    learn_rounding = False  # LSQ: the scale also learns from the rounding error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = self.grid()
        factor = 1.0
        if self.learn_rounding:
            # elements sharing one scale: per channel for weights, one sample's tensor for activations
            n = x.numel() // (grid.scale.numel() if self.for_weights else max(x.shape[0], 1)) if x.dim() else 1
            factor = lsq_gradient_factor(n, grid.qmax)
        return affine_fake_quantize(x, grid.scale, grid.zero_point, grid.qmin, grid.qmax, grid.axis,
                                    self.learn_rounding, factor)


class _SymmetricQuantizer(_TrainableAffineQuantizer):
    """Learns the threshold ``t``: scale = t / 2**(n-1) (signed) or t / 2**n (unsigned); for
    power-of-two, t is first rounded up to a power of two."""

    def __init__(self, quantization_config, freeze_quant_params=None):
        super().__init__(quantization_config, freeze_quant_params)
        self.signed = True if self.for_weights or self.params.get(SIGNED) is None else bool(self.params[SIGNED])
        self.min_threshold = float(self.quantization_config.min_threshold)
        t = self._param_array(THRESHOLD, positive=True)
        if self.method == QuantizationMethod.POWER_OF_TWO:  # exact in float32, so training starts on the PTQ grid
            t = np.asarray(quant_math.power_of_two_threshold(t if t.ndim else float(t), self.min_threshold))
        self.threshold = self._new_parameter(t)

    def _threshold(self) -> torch.Tensor:
        t = self.threshold.clamp_min(self.min_threshold)
        if self.method == QuantizationMethod.POWER_OF_TWO:
            t = straight_through(t, quant_math.power_of_two_threshold(t.detach(), self.min_threshold))
        return t

    def grid(self) -> quant_math.AffineGrid:
        n = self.num_bits
        scale = self._threshold() / 2.0 ** (n - 1 if self.signed else n)
        qmin, qmax = (-2 ** (n - 1), 2 ** (n - 1) - 1) if self.signed else (0, 2 ** n - 1)
        return quant_math.AffineGrid(scale, torch.zeros_like(scale.detach()), qmin, qmax, self.channel_axis)

    def inferable_params(self) -> Dict[str, Any]:
        t = self._threshold().detach().cpu().double().numpy()
        return {THRESHOLD: float(t) if t.ndim == 0 else t, SIGNED: self.signed}


class _UniformQuantizer(_TrainableAffineQuantizer):
    """Learns the scale and a float zero point (clamped to [0, 2**n - 1] and rounded, straight
    through, in the forward pass)."""

    def __init__(self, quantization_config, freeze_quant_params=None):
        super().__init__(quantization_config, freeze_quant_params)
        lo, hi = self._param_array(RANGE_MIN), self._param_array(RANGE_MAX)
        start = quant_math.uniform_grid(lo if lo.ndim else float(lo), hi if hi.ndim else float(hi),
                                        self.num_bits, self.channel_axis)
        self.scale = self._new_parameter(np.float32(start.scale))
        self.zero_point = self._new_parameter(start.zero_point)

    def grid(self) -> quant_math.AffineGrid:
        levels = 2 ** self.num_bits - 1
        scale = self.scale.clamp_min(MIN_THRESHOLD / levels)
        z = self.zero_point.clamp(0, levels)  # no gradient where it clamps
        return quant_math.AffineGrid(scale, straight_through(z, quant_math.round_to_integers(z)), 0, levels, self.channel_axis)

    def inferable_params(self) -> Dict[str, Any]:
        # The exact range of the grid the forward pass used: (q - z) * s at q = 0 and q = 2**n - 1,
        # in float64 (exact for a float32 scale); uniform_grid() turns it back into the same s and z.
        grid = self.grid()
        s = grid.scale.detach().cpu().double().numpy()
        z = grid.zero_point.detach().cpu().double().numpy()
        lo, hi = -z * s, (grid.qmax - z) * s
        return {RANGE_MIN: float(lo) if lo.ndim == 0 else lo, RANGE_MAX: float(hi) if hi.ndim == 0 else hi}


# ------------------------------------------------------------------------------ registered classes
@mark_quantizer(QuantizationTarget.Weights, _SYMMETRIC, TrainingMethod.STE)
class STESymmetricWeightsTrainableQuantizer(_SymmetricQuantizer):
    freeze_by_default = True


@mark_quantizer(QuantizationTarget.Weights, _SYMMETRIC, TrainingMethod.LSQ)
class LSQSymmetricWeightsTrainableQuantizer(_SymmetricQuantizer):
    learn_rounding = True


@mark_quantizer(QuantizationTarget.Weights, _UNIFORM, TrainingMethod.STE)
class STEUniformWeightsTrainableQuantizer(_UniformQuantizer):
    freeze_by_default = True


@mark_quantizer(QuantizationTarget.Weights, _UNIFORM, TrainingMethod.LSQ)
class LSQUniformWeightsTrainableQuantizer(_UniformQuantizer):
    learn_rounding = True


@mark_quantizer(QuantizationTarget.Activation, _SYMMETRIC, TrainingMethod.STE)
class STESymmetricActivationTrainableQuantizer(_SymmetricQuantizer, BasePytorchActivationTrainableQuantizer):
    pass


@mark_quantizer(QuantizationTarget.Activation, _SYMMETRIC, TrainingMethod.LSQ)
class LSQSymmetricActivationTrainableQuantizer(_SymmetricQuantizer, BasePytorchActivationTrainableQuantizer):
    learn_rounding = True


@mark_quantizer(QuantizationTarget.Activation, _UNIFORM, TrainingMethod.STE)
class STEUniformActivationTrainableQuantizer(_UniformQuantizer, BasePytorchActivationTrainableQuantizer):
    pass


@mark_quantizer(QuantizationTarget.Activation, _UNIFORM, TrainingMethod.LSQ)
class LSQUniformActivationTrainableQuantizer(_UniformQuantizer, BasePytorchActivationTrainableQuantizer):
    learn_rounding = True
