"""GPTQ weight quantizers for PyTorch (the two rounding types and what trains: gptq/soft_rounding.py): the
layer's float weight is fixed; :meth:`quantized_weights` gives the learned weights on the grid."""
from __future__ import annotations

from typing import List

import torch
from torch import nn

from hwquant.errors import InvalidConfigError
from hwquant.gptq.config import RoundingType, checked_gptq_quantizer_args
from hwquant.gptq.soft_rounding import SoftRoundingWeights, STERoundingWeights
from hwquant.torch.array_namespace import OPS
from hwquant.torch.trainable.base import BasePytorchTrainableQuantizer
from hwquant.torch.trainable.fake_quant import affine_fake_quantize
from hwquant.torch.trainable.quantizers import _SYMMETRIC, _UNIFORM, TrainableAffineQuantizer
from hwquant.trainable_infrastructure.common import QuantizationTarget, VariableGroup, mark_quantizer


class BasePytorchGPTQTrainableQuantizer(BasePytorchTrainableQuantizer):
    """Base of GPTQ weight quantizers. ``quantization_parameter_learning`` (MCT's override key) also
    learns the threshold / scale; by default the PTQ grid stays. The rounding variables are created by
    :meth:`init_rounding` from the float weights they will round."""

    freeze_by_default = True
    ops = OPS

    def __init__(self, quantization_config, quantization_parameter_learning: bool = False):
        checked_gptq_quantizer_args(type(self).__name__, quantization_parameter_learning)
        super().__init__(quantization_config, freeze_quant_params=not quantization_parameter_learning)
        self.quantization_parameter_learning = quantization_parameter_learning
        self.auxvar: nn.Parameter = nn.Parameter(torch.zeros(0))

    def init_rounding(self, weights: torch.Tensor) -> None:
        """Create the rounding variables for the float ``weights`` (the layer's kernel)."""
        self.initialize_quantization(tuple(weights.shape))
        start = self.initial_auxvar(weights.detach().float().cpu().numpy())  # type: ignore[attr-defined]
        self.auxvar = nn.Parameter(torch.from_numpy(start).to(weights.device, torch.float32))

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        if self.auxvar.shape != w.shape:
            raise InvalidConfigError(f"{type(self).__name__}: rounding variables of shape {tuple(self.auxvar.shape)} "
                                     f"for weights of shape {tuple(w.shape)}: call init_rounding(weights) first")
        return self.quantize(w)

    def quantize(self, w: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def quantization_parameters(self) -> List[nn.Parameter]:
        return [p for p in self.parameters() if p is not self.auxvar]

    def get_trainable_variables(self, group: VariableGroup) -> List[nn.Parameter]:
        return [self.auxvar] if group == VariableGroup.WEIGHTS else super().get_trainable_variables(group)

    @torch.no_grad()
    def quantized_weights(self, w: torch.Tensor) -> torch.Tensor:
        """The learned weights, on the grid (hard rounding), as the quantized model will use them."""
        was_training = self.training
        try:
            return self.eval()(w).detach()
        finally:
            self.train(was_training)


class _SoftRounding(SoftRoundingWeights, BasePytorchGPTQTrainableQuantizer):

    def quantize(self, w: torch.Tensor) -> torch.Tensor:
        return self.rounded(w, hard=not self.training)


class _STERounding(STERoundingWeights, BasePytorchGPTQTrainableQuantizer):

    def __init__(self, quantization_config, quantization_parameter_learning: bool = False,
                 max_lsbs_change: float = 1.0):
        super().__init__(quantization_config, quantization_parameter_learning)
        _, self.max_lsbs_change = checked_gptq_quantizer_args(type(self).__name__, quantization_parameter_learning,
                                                              max_lsbs_change)

    def quantize(self, w: torch.Tensor) -> torch.Tensor:
        shifted, grid = self.shifted(w)
        return affine_fake_quantize(shifted, grid.scale, grid.zero_point, grid.qmin, grid.qmax, grid.axis)


# ------------------------------------------------------------------------------ registered classes
def _registered(name: str, methods: list, rounding: RoundingType, base: type) -> type:
    """The registered ``base`` quantizer for the grids of ``methods``."""
    cls = type(name, (base, TrainableAffineQuantizer), {"__module__": __name__})
    return mark_quantizer(QuantizationTarget.Weights, methods, rounding)(cls)


SymmetricSoftRoundingGPTQ = _registered("SymmetricSoftRoundingGPTQ", _SYMMETRIC, RoundingType.SoftQuantizer, _SoftRounding)
UniformSoftRoundingGPTQ = _registered("UniformSoftRoundingGPTQ", _UNIFORM, RoundingType.SoftQuantizer, _SoftRounding)
STESymmetricGPTQ = _registered("STESymmetricGPTQ", _SYMMETRIC, RoundingType.STE, _STERounding)
STEUniformGPTQ = _registered("STEUniformGPTQ", _UNIFORM, RoundingType.STE, _STERounding)
