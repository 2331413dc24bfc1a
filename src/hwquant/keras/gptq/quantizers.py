"""GPTQ weight quantizers for Keras 3 (the two rounding types and what trains: gptq/soft_rounding.py): the
rounding variable is the layer's ``<kernel>_auxvar``; the call rounds softly while training and hard otherwise
(``training`` False or None: the weights are on the grid)."""
from __future__ import annotations

from typing import Any, List, Optional

import keras
import numpy as np
from keras import ops

from hwquant.errors import InvalidConfigError
from hwquant.gptq.config import RoundingType, checked_gptq_quantizer_args
from hwquant.gptq.soft_rounding import SoftRoundingWeights, STERoundingWeights
from hwquant.keras.array_namespace import OPS
from hwquant.keras.trainable.quantizers import TrainableAffineQuantizer, affine_fake_quantize
from hwquant.trainable_infrastructure.common import QuantizationTarget, VariableGroup, mark_quantizer
from hwquant.trainable_infrastructure.quantizer_spec import SYMMETRIC_METHODS, UNIFORM_METHODS

_PACKAGE = "hwquant"


class BaseKerasGPTQTrainableQuantizer(TrainableAffineQuantizer):
    """Base of Keras GPTQ weight quantizers. The float kernel is given with :meth:`init_rounding`
    before the holding wrapper builds; the rounding variable starts from it."""

    freeze_by_default = True
    ops = OPS

    def __init__(self, quantization_config, quantization_parameter_learning: bool = False):
        checked_gptq_quantizer_args(type(self).__name__, quantization_parameter_learning)
        super().__init__(quantization_config, freeze_quant_params=not quantization_parameter_learning)
        self.quantization_parameter_learning = quantization_parameter_learning
        self._float_weights: Optional[np.ndarray] = None
        self.auxvar: Any = None

    def init_rounding(self, weights: np.ndarray) -> None:
        """The float kernel the rounding variables will round."""
        self._float_weights = np.asarray(weights, np.float32)

    def initialize_quantization(self, tensor_shape, name: str, layer: Any) -> None:
        super().initialize_quantization(tensor_shape, name, layer)
        if self._float_weights is None or self._float_weights.shape != tuple(tensor_shape):
            raise InvalidConfigError(f"{type(self).__name__} for '{name}': call init_rounding(kernel) with the float "
                                     f"kernel of shape {tuple(tensor_shape)} before the layer builds")
        self.auxvar = layer.add_weight(name=f"{name}_auxvar", shape=tuple(tensor_shape), initializer="zeros")
        self.auxvar.assign(self.initial_auxvar(self._float_weights))  # type: ignore[attr-defined]

    def get_trainable_variables(self, group: VariableGroup) -> List[Any]:
        return [self.auxvar] if group == VariableGroup.WEIGHTS else super().get_trainable_variables(group)

    def get_config(self):
        return {**super().get_config(), "quantization_parameter_learning": self.quantization_parameter_learning}

    @classmethod
    def from_config(cls, config):
        return cls(cls._config_object(config), config.get("quantization_parameter_learning", False))


class _SoftRounding(SoftRoundingWeights, BaseKerasGPTQTrainableQuantizer):

    def __call__(self, inputs: Any, training: Any = True) -> Any:
        return self.rounded(ops.convert_to_tensor(inputs), hard=not training)


class _STERounding(STERoundingWeights, BaseKerasGPTQTrainableQuantizer):

    def __init__(self, quantization_config, quantization_parameter_learning: bool = False, max_lsbs_change: float = 1.0):
        super().__init__(quantization_config, quantization_parameter_learning)
        _, self.max_lsbs_change = checked_gptq_quantizer_args(type(self).__name__, quantization_parameter_learning,
                                                              max_lsbs_change)

    def __call__(self, inputs: Any, training: Any = True) -> Any:
        return affine_fake_quantize(*self.shifted(ops.convert_to_tensor(inputs)))

    def get_config(self):
        return {**super().get_config(), "max_lsbs_change": self.max_lsbs_change}

    @classmethod
    def from_config(cls, config):
        return cls(cls._config_object(config), config.get("quantization_parameter_learning", False),
                   config.get("max_lsbs_change", 1.0))


# ------------------------------------------------------------------------------ registered classes
def _registered(name: str, methods: list, rounding: RoundingType, base: type) -> type:
    """The registered (and Keras-serializable) ``base`` quantizer for the grids of ``methods``."""
    cls = mark_quantizer(QuantizationTarget.Weights, methods, rounding)(type(name, (base,), {"__module__": __name__}))
    return keras.saving.register_keras_serializable(_PACKAGE)(cls)


SymmetricSoftRoundingGPTQ = _registered("SymmetricSoftRoundingGPTQ", SYMMETRIC_METHODS, RoundingType.SoftQuantizer, _SoftRounding)
UniformSoftRoundingGPTQ = _registered("UniformSoftRoundingGPTQ", UNIFORM_METHODS, RoundingType.SoftQuantizer, _SoftRounding)
STESymmetricGPTQ = _registered("STESymmetricGPTQ", SYMMETRIC_METHODS, RoundingType.STE, _STERounding)
STEUniformGPTQ = _registered("STEUniformGPTQ", UNIFORM_METHODS, RoundingType.STE, _STERounding)
