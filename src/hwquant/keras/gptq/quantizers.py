"""GPTQ weight quantizers for Keras 3 (the two rounding types and what trains: gptq/soft_rounding.py): the
rounding variable is the layer's ``<kernel>_auxvar``; the call rounds softly while training and hard otherwise
(``training`` False or None: the weights are on the grid)."""
from __future__ import annotations

from typing import Any, List, Optional

import keras
import numpy as np
from keras import ops

from hwquant.core.numerics import quant_math
from hwquant.errors import InvalidConfigError
from hwquant.gptq.config import RoundingType, checked_gptq_quantizer_args
from hwquant.gptq.soft_rounding import initial_soft_rounding, rounding_regularization, soft_targets
from hwquant.keras.array_namespace import OPS
from hwquant.keras.trainable.quantizers import TrainableAffineQuantizer, affine_fake_quantize
from hwquant.trainable_infrastructure.common import QuantizationTarget, VariableGroup, mark_quantizer
from hwquant.trainable_infrastructure.quantizer_spec import SYMMETRIC_METHODS, UNIFORM_METHODS

_PACKAGE = "hwquant"


class BaseKerasGPTQTrainableQuantizer(TrainableAffineQuantizer):
    """Base of Keras GPTQ weight quantizers. The float kernel is given with :meth:`init_rounding`
    before the holding wrapper builds; the rounding variable starts from it."""

    freeze_by_default = True

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
        self.auxvar.assign(self._initial_auxvar(self._float_weights))

    def _initial_auxvar(self, w: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def get_trainable_variables(self, group: VariableGroup) -> List[Any]:
        return [self.auxvar] if group == VariableGroup.WEIGHTS else super().get_trainable_variables(group)

    def rounding_regularization(self, beta: float) -> Any:
        """The rounding regulariser of this kernel (0 for STE)."""
        return ops.zeros(())

    def get_config(self):
        return {**super().get_config(), "quantization_parameter_learning": self.quantization_parameter_learning}

    @classmethod
    def from_config(cls, config):
        return cls(cls._config_object(config), config.get("quantization_parameter_learning", False))


class _SoftRounding(BaseKerasGPTQTrainableQuantizer):

    def _initial_auxvar(self, w: np.ndarray) -> np.ndarray:
        grid = self.grid()
        numpy_grid = quant_math.AffineGrid(quant_math._to_numpy(grid.scale), quant_math._to_numpy(grid.zero_point),
                                           grid.qmin, grid.qmax, grid.axis)
        return initial_soft_rounding(quant_math.rounding_remainders(w, numpy_grid))

    def soft_targets(self) -> Any:
        return soft_targets(OPS, self.auxvar)

    def __call__(self, inputs: Any, training: Any = True) -> Any:
        h = self.soft_targets()
        if not training:
            h = ops.cast(ops.greater_equal(h, 0.5), h.dtype)
        return quant_math.soft_rounded(ops.convert_to_tensor(inputs), self.grid(), h)

    def rounding_regularization(self, beta: float) -> Any:
        return rounding_regularization(OPS, self.auxvar, beta)


class _STERounding(BaseKerasGPTQTrainableQuantizer):

    def __init__(self, quantization_config, quantization_parameter_learning: bool = False, max_lsbs_change: float = 1.0):
        super().__init__(quantization_config, quantization_parameter_learning)
        _, self.max_lsbs_change = checked_gptq_quantizer_args(type(self).__name__, quantization_parameter_learning,
                                                              max_lsbs_change)

    def _initial_auxvar(self, w: np.ndarray) -> np.ndarray:
        return np.zeros_like(w)

    def __call__(self, inputs: Any, training: Any = True) -> Any:
        grid = self.grid()
        w = ops.stop_gradient(ops.convert_to_tensor(inputs))
        shift = ops.clip(self.auxvar, -self.max_lsbs_change, self.max_lsbs_change)
        s = ops.stop_gradient(quant_math.per_channel_view(grid.scale, w, grid.axis))
        # the shifted weight in real units; its rounding is passed straight through to the shift
        return affine_fake_quantize(w + shift * s, grid)

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
