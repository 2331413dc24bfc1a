"""BaseKerasTrainableQuantizer: what every trainable Keras quantizer is and must implement.

As in MCT, a Keras quantizer is not a layer: the layer holding it (a KerasQuantizationWrapper or a
KerasActivationQuantizationHolder) calls :meth:`initialize_quantization` when it builds, and the
quantizer creates its variables on that layer (``layer.add_weight``). So they are the layer's own
variables: ``model.fit`` trains them, ``model.save`` stores them, a loaded model restores them. The
quantizer itself is plain data (``get_config`` / ``from_config``) registered as a Keras serializable.
What it learns and how that becomes a grid is framework-free (trainable_infrastructure/quantizer_spec.py).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from hwquant.core.numerics import quant_math
from hwquant.errors import InvalidConfigError
from hwquant.trainable_infrastructure.common import VariableGroup
from hwquant.trainable_infrastructure.quantizer_spec import TrainableConfig, TrainableQuantizerSpec


class BaseKerasTrainableQuantizer(TrainableQuantizerSpec, ABC):
    """Base of trainable Keras quantizers. A subclass implements ``__call__(inputs, training)`` (the
    fake-quantized tensor, differentiable) and ``grid()``; ``freeze_quant_params`` keeps the
    quantization parameters fixed (non-trainable variables), None takes the training method's default."""

    framework = "keras"

    def __init__(self, quantization_config: TrainableConfig, freeze_quant_params: Optional[bool] = None):
        self._set_config(quantization_config, freeze_quant_params)
        self._initial = self.initial_values()  # (checks the parameters now, not when the model builds)
        self._variables: Dict[str, Any] = {}

    # -------------------------------------------------------------- what a quantizer implements
    @abstractmethod
    def __call__(self, inputs: Any, training: Any = True) -> Any:
        """The fake-quantized tensor, with gradients to the inputs and to the learned variables."""

    @abstractmethod
    def grid(self) -> quant_math.AffineGrid:
        """The current grid (tensors attached to the learned variables)."""

    # -------------------------------------------------------------- common behaviour
    def initialize_quantization(self, tensor_shape: Sequence[Any], name: str, layer: Any) -> None:
        """Create the learned variables on ``layer`` (the wrapper or holder that owns this quantizer),
        starting at the PTQ grid, after checking them against the shape of the tensor to quantize."""
        self.check_tensor_shape(tensor_shape, name, max((v.size for v in self._initial.values()), default=1))
        for key, value in self._initial.items():
            var = layer.add_weight(name=f"{name}_{key}" if name else key, shape=value.shape, initializer="zeros",
                                   trainable=not self.freeze_quant_params)
            var.assign(value)
            self._variables[key] = var

    def _check_initialized(self) -> None:
        if not self._variables:
            raise InvalidConfigError(f"{type(self).__name__} has no variables yet: it is initialized by the layer "
                                     "holding it (KerasQuantizationWrapper / KerasActivationQuantizationHolder) when "
                                     "that layer builds")

    def quantization_parameters(self) -> List[Any]:
        """The variables that define the grid (trainable or frozen)."""
        return list(self._variables.values())

    def get_trainable_variables(self, group: VariableGroup) -> List[Any]:
        """The quantizer's trainable variables of ``group``: its quantization parameters (QPARAMS). The
        weights a weight quantizer quantizes belong to the layer, not to the quantizer."""
        if not isinstance(group, VariableGroup):
            raise InvalidConfigError(f"group must be a VariableGroup, got {group!r}")
        return [v for v in self.quantization_parameters() if v.trainable] if group == VariableGroup.QPARAMS else []

    def inferable_params(self) -> Dict[str, Any]:
        """The current grid as quantization parameters (keys of hwquant.constants)."""
        self._check_initialized()
        return self.inferable_params_of(self.grid())

    def convert_to_inferable_quantizers(self):
        """The inferable quantizer of the current grid (bitwise the same outputs)."""
        from hwquant.keras.quantizers import make_quantizer

        params = self.inferable_params()
        bad = [k for k, v in params.items() if not isinstance(v, bool) and not np.isfinite(np.asarray(v)).all()]
        if bad:
            raise ValueError(f"the learned {', '.join(bad)} are not finite: {params}")
        return make_quantizer(self.method, self.num_bits, params, channel_axis=self.channel_axis,
                              target="weights" if self.for_weights else "activation")

    convert2inferable = convert_to_inferable_quantizers  # MCT's name

    def get_config(self) -> Dict[str, Any]:
        """Plain JSON data (arrays as lists), as a `.keras` file stores it."""
        return _plain(super().get_config())

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "BaseKerasTrainableQuantizer":
        """The quantizer of ``get_config()`` (its learned values are restored with the layer's variables)."""
        return cls(cls._config_object(config), config.get("freeze_quant_params"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


class BaseKerasActivationTrainableQuantizer(BaseKerasTrainableQuantizer, ABC):
    """Base of trainable activation quantizers (MCT's name; a custom one subclasses it)."""


class BaseKerasWeightTrainableQuantizer(BaseKerasTrainableQuantizer, ABC):
    """Base of trainable weight quantizers (MCT's name; a custom one subclasses it)."""
