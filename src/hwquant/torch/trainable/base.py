"""BasePytorchTrainableQuantizer: what every trainable PyTorch quantizer is and must implement.

A trainable quantizer is an ``nn.Module`` whose learned quantization parameters are its own
``nn.Parameter``s, so they live in the model's ``state_dict``, move with ``.to()``, reach any
optimizer through ``model.parameters()`` and are synchronised by DistributedDataParallel like any
other weight. It sits where an inferable quantizer sits (in a PytorchQuantizationWrapper or a
PytorchActivationQuantizationHolder) and converts back to one after training.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from hwquant.core import quant_math
from hwquant.errors import InvalidConfigError
from hwquant.trainable_infrastructure.common import QuantizationTarget, VariableGroup
from hwquant.trainable_infrastructure.config import TrainableQuantizerActivationConfig, TrainableQuantizerWeightsConfig

TrainableConfig = Union[TrainableQuantizerWeightsConfig, TrainableQuantizerActivationConfig]


class BasePytorchTrainableQuantizer(nn.Module, ABC):
    """Base of trainable PyTorch quantizers: validates its configuration against the target and the
    quantization methods the class is registered for (``mark_quantizer``), and defines what a
    quantizer implements:

    - ``forward(x)``: the fake-quantized tensor, differentiable;
    - ``grid()``: the current integer grid (``quant_math.AffineGrid``), what ``forward`` rounds onto;
    - ``inferable_params()``: the quantization parameters of that grid in the keys of
      ``hwquant.constants``, from which ``convert_to_inferable_quantizers()`` builds the equivalent
      inferable quantizer (bitwise the same outputs).

    ``freeze_quant_params`` keeps the quantization parameters fixed (``requires_grad=False``); None
    takes the training method's default.
    """

    framework = "pytorch"
    freeze_by_default = False

    def __init__(self, quantization_config: TrainableConfig, freeze_quant_params: Optional[bool] = None):
        super().__init__()
        self.quantization_config = self._validated(quantization_config)
        if freeze_quant_params is not None and not isinstance(freeze_quant_params, bool):
            raise InvalidConfigError(f"{type(self).__name__}: freeze_quant_params must be a bool or None, "
                                     f"got {freeze_quant_params!r}")
        self.freeze_quant_params = self.freeze_by_default if freeze_quant_params is None else freeze_quant_params

    # -------------------------------------------------------------- the configuration, read uniformly
    @property
    def for_weights(self) -> bool:
        return self.quantization_target == QuantizationTarget.Weights

    def _field(self, name: str) -> Any:
        prefix = "weights_" if self.for_weights else "activation_"
        return getattr(self.quantization_config, prefix + name)

    @property
    def method(self):
        return self._field("quantization_method")

    @property
    def num_bits(self) -> int:
        return self._field("n_bits")

    @property
    def params(self) -> Dict[str, Any]:
        return self._field("quantization_params")

    @property
    def channel_axis(self) -> Optional[int]:
        cfg = self.quantization_config
        return cfg.weights_channels_axis if self.for_weights and cfg.weights_per_channel_threshold else None

    def _validated(self, cfg: Any) -> TrainableConfig:
        name = type(self).__name__
        if not hasattr(type(self), "quantization_target"):
            raise InvalidConfigError(f"{name} is not registered: decorate it with "
                                     f"hwquant.trainable_infrastructure.mark_quantizer(...)")
        expected = (TrainableQuantizerWeightsConfig if self.quantization_target == QuantizationTarget.Weights
                    else TrainableQuantizerActivationConfig)
        if not isinstance(cfg, expected):
            raise InvalidConfigError(f"{name} quantizes {self.quantization_target.name.lower()} and needs a "
                                     f"{expected.__name__}, got {type(cfg).__name__}")
        prefix = "weights_" if expected is TrainableQuantizerWeightsConfig else "activation_"
        method = getattr(cfg, prefix + "quantization_method")
        if method not in self.quantization_method:
            raise InvalidConfigError(f"{name} implements {[m.name for m in self.quantization_method]}, but the "
                                     f"config asks for {method.name}")
        if not getattr(cfg, f"enable_{prefix}quantization"):
            raise InvalidConfigError(f"{name}: the config has enable_{prefix}quantization=False; a layer whose "
                                     f"{prefix[:-1]} quantization is disabled gets no quantizer")
        return cfg

    def _param_array(self, key: str, positive: bool = False) -> np.ndarray:
        """A quantization parameter from the config as float64: a scalar, or one value per channel."""
        if key not in self.params:
            raise InvalidConfigError(f"{type(self).__name__}: {self.method.name} quantization needs '{key}' in the "
                                     f"quantization params, got keys {sorted(self.params)}")
        try:
            a = np.asarray(quant_math._to_numpy(self.params[key]), dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{type(self).__name__}: '{key}' must be a number or an array of numbers, "
                                     f"got {self.params[key]!r}") from None
        if self.channel_axis is None and a.size != 1:
            raise InvalidConfigError(f"{type(self).__name__}: a per-tensor quantizer needs one '{key}', got "
                                     f"{a.size} values (per-channel quantization needs weights_per_channel_threshold=True)")
        if a.ndim > 1 or a.size == 0 or not np.isfinite(a).all() or (positive and (a <= 0).any()):
            raise InvalidConfigError(f"{type(self).__name__}: '{key}' must be finite{' and > 0' if positive else ''} "
                                     f"(a scalar or a 1-D array), got {a.tolist()!r}")
        return a.reshape(()) if self.channel_axis is None else a.reshape(-1)

    def _new_parameter(self, value: Any) -> nn.Parameter:
        return nn.Parameter(torch.as_tensor(np.asarray(value), dtype=torch.float32),
                            requires_grad=not self.freeze_quant_params)

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
        axis = self.channel_axis
        if axis is None:
            return
        shape = tuple(tensor_shape)
        if not -len(shape) <= axis < len(shape):
            raise InvalidConfigError(f"{type(self).__name__} for '{name}': channel axis {axis} does not exist in a "
                                     f"tensor of shape {shape}")
        channels = max((p.numel() for p in self.quantization_parameters()), default=1)
        if channels not in (1, shape[axis]):
            raise InvalidConfigError(f"{type(self).__name__} for '{name}': {channels} per-channel parameters but the "
                                     f"tensor has {shape[axis]} channels along axis {axis}")

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

    def get_config(self) -> Dict[str, Any]:
        """Plain data to rebuild this quantizer with ``from_config`` (learned values travel in the
        state dict, as for any module)."""
        return {"quantization_config": self.quantization_config.get_config(),
                "freeze_quant_params": self.freeze_quant_params}

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "BasePytorchTrainableQuantizer":
        if not isinstance(config, dict) or "quantization_config" not in config:
            raise InvalidConfigError(f"{cls.__name__}.from_config expects the dict of get_config(), got {config!r}")
        cfg_cls = (TrainableQuantizerWeightsConfig if cls.quantization_target == QuantizationTarget.Weights
                   else TrainableQuantizerActivationConfig)
        return cls(cfg_cls.from_config(config["quantization_config"]), config.get("freeze_quant_params"))

    def extra_repr(self) -> str:
        axis = f", per-channel axis {self.channel_axis}" if self.channel_axis is not None else ""
        frozen = ", frozen parameters" if self.freeze_quant_params else ""
        return f"{self.identifier.name}, {self.method.name}, {self.num_bits} bits{axis}{frozen}"


class BasePytorchActivationTrainableQuantizer(BasePytorchTrainableQuantizer, ABC):
    """Base of trainable activation quantizers (MCT's name; a custom one subclasses it)."""
