"""The trainable PyTorch quantizers: power-of-two / symmetric and uniform, for weights and
activations, trained with STE or LSQ (see ``TrainingMethod``). What they learn and how it becomes a
grid is written once for every framework (trainable_infrastructure/quantizer_spec.py); here the
variables are ``nn.Parameter``s and the gradients come from ``fake_quant.affine_fake_quantize``.

Defaults, as in MCT: STE weight quantizers keep the PTQ parameters fixed (the weights learn); STE
activation quantizers and every LSQ quantizer learn theirs (``freeze_quant_params`` overrides).
"""
from __future__ import annotations

from typing import Any, Dict

import torch

from hwquant.core import quant_math
from hwquant.torch.trainable.base import BasePytorchActivationTrainableQuantizer, BasePytorchTrainableQuantizer
from hwquant.torch.trainable.fake_quant import affine_fake_quantize
from hwquant.trainable_infrastructure.common import QuantizationTarget, TrainingMethod, mark_quantizer
from hwquant.trainable_infrastructure.quantizer_spec import SYMMETRIC_METHODS as _SYMMETRIC
from hwquant.trainable_infrastructure.quantizer_spec import UNIFORM_METHODS as _UNIFORM


class TrainableAffineQuantizer(BasePytorchTrainableQuantizer):
    """A quantizer learning a symmetric / power-of-two threshold or a uniform scale and zero point
    (parameters ``threshold``, or ``scale`` and ``zero_point``), fake-quantizing onto their grid."""

    def __init__(self, quantization_config, freeze_quant_params=None):
        super().__init__(quantization_config, freeze_quant_params)
        self._variable_names = []
        for name, value in self.initial_values().items():
            setattr(self, name, self._new_parameter(value))
            self._variable_names.append(name)

    def grid(self) -> quant_math.AffineGrid:
        return self.grid_of({name: getattr(self, name) for name in self._variable_names})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = self.grid()
        return affine_fake_quantize(x, grid.scale, grid.zero_point, grid.qmin, grid.qmax, grid.axis,
                                    self.learn_rounding, self.scale_gradient_factor(tuple(x.shape), grid))

    def inferable_params(self) -> Dict[str, Any]:
        return self.inferable_params_of(self.grid())


# ------------------------------------------------------------------------------ registered classes
@mark_quantizer(QuantizationTarget.Weights, _SYMMETRIC, TrainingMethod.STE)
class STESymmetricWeightsTrainableQuantizer(TrainableAffineQuantizer):
    freeze_by_default = True


@mark_quantizer(QuantizationTarget.Weights, _SYMMETRIC, TrainingMethod.LSQ)
class LSQSymmetricWeightsTrainableQuantizer(TrainableAffineQuantizer):
    learn_rounding = True


@mark_quantizer(QuantizationTarget.Weights, _UNIFORM, TrainingMethod.STE)
class STEUniformWeightsTrainableQuantizer(TrainableAffineQuantizer):
    freeze_by_default = True


@mark_quantizer(QuantizationTarget.Weights, _UNIFORM, TrainingMethod.LSQ)
class LSQUniformWeightsTrainableQuantizer(TrainableAffineQuantizer):
    learn_rounding = True


@mark_quantizer(QuantizationTarget.Activation, _SYMMETRIC, TrainingMethod.STE)
class STESymmetricActivationTrainableQuantizer(TrainableAffineQuantizer, BasePytorchActivationTrainableQuantizer):
    pass


@mark_quantizer(QuantizationTarget.Activation, _SYMMETRIC, TrainingMethod.LSQ)
class LSQSymmetricActivationTrainableQuantizer(TrainableAffineQuantizer, BasePytorchActivationTrainableQuantizer):
    learn_rounding = True


@mark_quantizer(QuantizationTarget.Activation, _UNIFORM, TrainingMethod.STE)
class STEUniformActivationTrainableQuantizer(TrainableAffineQuantizer, BasePytorchActivationTrainableQuantizer):
    pass


@mark_quantizer(QuantizationTarget.Activation, _UNIFORM, TrainingMethod.LSQ)
class LSQUniformActivationTrainableQuantizer(TrainableAffineQuantizer, BasePytorchActivationTrainableQuantizer):
    learn_rounding = True
