"""BasePytorchTrainableQuantizer: what every trainable PyTorch quantizer is and must implement.

A trainable quantizer is an ``nn.Module`` whose learned quantization parameters are its own
``nn.Parameter``s, so they live in the model's ``state_dict``, move with ``.to()``, reach any
optimizer through ``model.parameters()`` and are synchronised by DistributedDataParallel like any
other weight. It sits where an inferable quantizer sits (in a PytorchQuantizationWrapper or a
PytorchActivationQuantizationHolder) and converts back to one after training.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import nn

from hwquant.core.numerics import quant_math
from hwquant.errors import InvalidConfigError
from hwquant.trainable_infrastructure.common import VariableGroup
from hwquant.trainable_infrastructure.quantizer_spec import TrainableConfig, TrainableQuantizerSpec


class BasePytorchTrainableQuantizer(nn.Module, TrainableQuantizerSpec, ABC):
    """Base of trainable PyTorch quantizers: validates its configuration against the target and the
    quantization methods the class is registered for (``mark_quantizer``), and defines what a
    quantizer implements:

    - ``forward(x)``: the fake-quantized tensor, differentiable;
    - ``grid()``: the current integer grid (``quant_math.AffineGrid``), what ``forward`` rounds onto;
    - ``inferable_params()``: the quantization parameters of that grid in the keys of
      ``hwquant.constants``, from which ``convert_to_inferable_quantizers()`` builds the equivalent
      inferable quantizer (bitwise the same outputs).

    ``freeze_quant_params`` keeps the quantization parameters fixed (``requires_grad=False``); None
    takes the training method's default. The configuration is read as on every framework
    (trainable_infrastructure/quantizer_spec.py).
    """

    framework = "pytorch"

    def __init__(self, quantization_config: TrainableConfig, freeze_quant_params: Optional[bool] = None):
        super().__init__()
        self._set_config(quantization_config, freeze_quant_params)

    # -------------------------------------------------------------- what a quantizer implements
    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The fake-quantized tensor, with gradients to x and to the learned parameters."""

    @abstractmethod
    def grid(self) -> quant_math.AffineGrid:
        """The current grid (torch tensors, attached to the learned parameters)."""

    @abstractmethod
    def inferable_params(self) -> Dict[str, Any]:
        """The current grid as quantization parameters (keys of hwquant.constants), python / numpy values."""

    # -------------------------------------------------------------- common behaviour
    def initialize_quantization(self, tensor_shape: Sequence[int], name: str = "", layer: Any = None) -> None:
        """Check the quantizer against the shape of the tensor it will quantize (the documented API's
        hook; the parameters themselves are created with the quantizer)."""
        self.check_tensor_shape(tensor_shape, name, max((p.numel() for p in self.quantization_parameters()), default=1))

    def quantization_parameters(self) -> List[nn.Parameter]:
        """The parameters that define the grid (trainable or frozen)."""
        return list(self.parameters())

    def get_trainable_variables(self, group: VariableGroup) -> List[nn.Parameter]:
        """The quantizer's trainable variables of ``group``: its quantization parameters (QPARAMS).
        The weights a weight quantizer quantizes belong to the layer, not to the quantizer."""
        if not isinstance(group, VariableGroup):
            raise InvalidConfigError(f"group must be a VariableGroup, got {group!r}")
        return [p for p in self.quantization_parameters() if p.requires_grad] if group == VariableGroup.QPARAMS else []

    def convert_to_inferable_quantizers(self):
        """The inferable quantizer of the current grid (bitwise the same outputs)."""
        from hwquant.torch.quantizers import make_inferable_quantizer
        target = "weights" if self.for_weights else "activation"
        with torch.no_grad():
            params = self.inferable_params()
        return make_inferable_quantizer(self.method, self.num_bits, params, channel_axis=self.channel_axis,
                                        target=target)

    convert2inferable = convert_to_inferable_quantizers  # MCT's name

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "BasePytorchTrainableQuantizer":
        """The quantizer of ``get_config()`` (learned values travel in the state dict, as for any module)."""
        return cls(cls._config_object(config), config.get("freeze_quant_params"))

    def extra_repr(self) -> str:
        return self.describe()


class BasePytorchActivationTrainableQuantizer(BasePytorchTrainableQuantizer, ABC):
    """Base of trainable activation quantizers (MCT's name; a custom one subclasses it)."""
