"""The trainable PyTorch quantizers: power-of-two / symmetric and uniform, for weights and
activations, trained with STE or LSQ (see ``TrainingMethod``). What they learn and how it becomes a
grid is written once for every framework (trainable_infrastructure/quantizer_spec.py); here the
variables are ``nn.Parameter``s and the gradients come from ``fake_quant.affine_fake_quantize``.

Defaults, as in MCT: STE weight quantizers keep the PTQ parameters fixed (the weights learn); STE
activation quantizers and every LSQ quantizer learn theirs (``freeze_quant_params`` overrides).
"""
from __future__ import annotations

from typing import Any, Dict

import numpy as np
import torch

from hwquant.core.numerics import quant_math
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
        self._variable_names, self._scalar_names = [], set()
        for name, value in self.initial_values().items():
            value = torch.as_tensor(np.asarray(value), dtype=torch.float32)
            if value.dim() == 0:  # held as one element: FSDP's fully_shard refuses 0-d parameters
                value, _ = value.reshape(1), self._scalar_names.add(name)
            setattr(self, name, torch.nn.Parameter(value, requires_grad=not self.freeze_quant_params))
            self._variable_names.append(name)
        self._register_load_state_dict_pre_hook(self._accept_scalars)

    def _accept_scalars(self, state_dict, prefix, *args) -> None:
        """Checkpoints written before the per-tensor variables became one-element tensors load too."""
        for name in self._scalar_names:
            value = state_dict.get(prefix + name)
            if isinstance(value, torch.Tensor) and value.dim() == 0:
                state_dict[prefix + name] = value.reshape(1)

    def grid(self) -> quant_math.AffineGrid:
        return self.grid_of({name: getattr(self, name).reshape(()) if name in self._scalar_names else getattr(self, name)
                             for name in self._variable_names})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = self.grid()
        return affine_fake_quantize(x, grid.scale, grid.zero_point, grid.qmin, grid.qmax, grid.axis,
                                    self.learn_rounding, self.scale_gradient_factor(tuple(x.shape), grid))

    def inferable_params(self) -> Dict[str, Any]:
        return self.inferable_params_of(self.grid())


# ------------------------------------------------------------------------------ registered classes
def _registered(name: str, target: QuantizationTarget, methods: list, training: TrainingMethod) -> type:
    """The registered quantizer class ``name``, with the defaults of the module docstring."""
    weights = target == QuantizationTarget.Weights
    bases = (TrainableAffineQuantizer,) if weights else (TrainableAffineQuantizer, BasePytorchActivationTrainableQuantizer)
    attributes = {"__module__": __name__, "freeze_by_default": weights and training == TrainingMethod.STE,
                  "learn_rounding": training == TrainingMethod.LSQ}
    return mark_quantizer(target, methods, training)(type(name, bases, attributes))


_W, _A, _STE, _LSQ = QuantizationTarget.Weights, QuantizationTarget.Activation, TrainingMethod.STE, TrainingMethod.LSQ
STESymmetricWeightsTrainableQuantizer = _registered("STESymmetricWeightsTrainableQuantizer", _W, _SYMMETRIC, _STE)
LSQSymmetricWeightsTrainableQuantizer = _registered("LSQSymmetricWeightsTrainableQuantizer", _W, _SYMMETRIC, _LSQ)
STEUniformWeightsTrainableQuantizer = _registered("STEUniformWeightsTrainableQuantizer", _W, _UNIFORM, _STE)
LSQUniformWeightsTrainableQuantizer = _registered("LSQUniformWeightsTrainableQuantizer", _W, _UNIFORM, _LSQ)
STESymmetricActivationTrainableQuantizer = _registered("STESymmetricActivationTrainableQuantizer", _A, _SYMMETRIC, _STE)
LSQSymmetricActivationTrainableQuantizer = _registered("LSQSymmetricActivationTrainableQuantizer", _A, _SYMMETRIC, _LSQ)
STEUniformActivationTrainableQuantizer = _registered("STEUniformActivationTrainableQuantizer", _A, _UNIFORM, _STE)
LSQUniformActivationTrainableQuantizer = _registered("LSQUniformActivationTrainableQuantizer", _A, _UNIFORM, _LSQ)
