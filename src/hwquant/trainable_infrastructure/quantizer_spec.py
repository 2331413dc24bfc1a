"""What a trainable quantizer is on every framework, written once: it reads and checks its config,
chooses the variables it learns and their starting values, turns them into the grid the forward pass
rounds onto, and turns that grid back into the parameters of the inferable quantizer.

Learned variables: symmetric and power-of-two quantizers learn the threshold (the power of two is
taken in the forward pass, passed straight through in the backward pass); uniform quantizers learn
the scale and a float zero point (rounded in the forward pass), the LSQ+ parameterisation, so the PTQ
grid is the exact starting point and the learned grid converts exactly to range_min / range_max.

A framework's base class (torch/trainable/base.py, keras/trainable/base.py) mixes this in and owns the
variables; the arithmetic goes through ``quant_math`` (its array namespaces), so the same lines build
a torch grid and a Keras one.
"""
from __future__ import annotations

import math
from enum import Enum
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np

from hwquant.constants import MIN_THRESHOLD, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core.numerics import quant_math
from hwquant.errors import InvalidConfigError
from hwquant.tpc.enums import QuantizationMethod
from hwquant.trainable_infrastructure.common import QuantizationTarget
from hwquant.trainable_infrastructure.config import TrainableQuantizerActivationConfig, TrainableQuantizerWeightsConfig

TrainableConfig = Union[TrainableQuantizerWeightsConfig, TrainableQuantizerActivationConfig]
SYMMETRIC_METHODS = [QuantizationMethod.POWER_OF_TWO, QuantizationMethod.SYMMETRIC]
UNIFORM_METHODS = [QuantizationMethod.UNIFORM]


def lsq_gradient_factor(elements_per_scale: int, qmax: int) -> float:
    """LSQ's step-size gradient scale 1 / sqrt(N * Q_max) (Esser et al. 2020, section 2.2)."""
    return 1.0 / math.sqrt(max(elements_per_scale, 1) * max(qmax, 1))


class TrainableQuantizerSpec:
    """The framework-free half of a trainable quantizer (see the module docstring). Class attributes:
    ``freeze_by_default`` (the training method keeps the PTQ parameters unless told otherwise) and
    ``learn_rounding`` (LSQ: the scale also learns from the rounding error)."""

    freeze_by_default = False
    learn_rounding = False
    quantization_target: QuantizationTarget  # these three are set by mark_quantizer
    quantization_method: list
    identifier: Enum
    quantization_config: Any  # a TrainableConfig, checked by _validated

    def _set_config(self, quantization_config: Any, freeze_quant_params: Optional[bool]) -> None:
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
    def method(self) -> QuantizationMethod:
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

    @property
    def symmetric(self) -> bool:
        return self.method in SYMMETRIC_METHODS

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

    def check_tensor_shape(self, tensor_shape: Sequence[Any], name: str, channels: int) -> None:
        """Refuse a tensor to quantize that the quantizer's axis or its ``channels`` parameters do not fit."""
        axis = self.channel_axis
        if axis is None:
            return
        shape = tuple(tensor_shape)
        if not -len(shape) <= axis < len(shape):
            raise InvalidConfigError(f"{type(self).__name__} for '{name}': channel axis {axis} does not exist in a "
                                     f"tensor of shape {shape}")
        if channels not in (1, shape[axis]):
            raise InvalidConfigError(f"{type(self).__name__} for '{name}': {channels} per-channel parameters but the "
                                     f"tensor has {shape[axis]} channels along axis {axis}")

    # -------------------------------------------------------------- the learned variables and their grid
    def initial_values(self) -> Dict[str, np.ndarray]:
        """{variable name: float32 starting value}: the PTQ grid, exactly."""
        if self.symmetric:
            self.signed = True if self.for_weights or self.params.get(SIGNED) is None else bool(self.params[SIGNED])
            self.min_threshold = float(self.quantization_config.min_threshold)
            t = self._param_array(THRESHOLD, positive=True)
            if self.method == QuantizationMethod.POWER_OF_TWO:  # exact in float32: training starts on the PTQ grid
                t = np.asarray(quant_math.power_of_two_threshold(t if t.ndim else float(t), self.min_threshold))
            return {THRESHOLD: np.asarray(t, np.float32)}
        lo, hi = self._param_array(RANGE_MIN), self._param_array(RANGE_MAX)
        start = quant_math.uniform_grid(lo if lo.ndim else float(lo), hi if hi.ndim else float(hi),
                                        self.num_bits, self.channel_axis)
        return {"scale": np.asarray(start.scale, np.float32), "zero_point": np.asarray(start.zero_point, np.float32)}

    def threshold_of(self, threshold: Any) -> Any:
        """The threshold the grid uses: at least ``min_threshold``, a power of two for power-of-two
        quantizers (straight through)."""
        t = quant_math.clip_below(threshold, self.min_threshold)
        if self.method == QuantizationMethod.POWER_OF_TWO:
            t = quant_math.straight_through(t, quant_math.power_of_two_threshold(quant_math.stop_gradient(t),
                                                                                   self.min_threshold))
        return t

    def grid_of(self, variables: Dict[str, Any]) -> quant_math.AffineGrid:
        """The grid of the learned ``variables`` (tensors of the framework, attached to them)."""
        n = self.num_bits
        if self.symmetric:
            scale = self.threshold_of(variables[THRESHOLD]) / 2.0 ** (n - 1 if self.signed else n)
            qmin, qmax = (-2 ** (n - 1), 2 ** (n - 1) - 1) if self.signed else (0, 2 ** n - 1)
            zero = quant_math.namespace_of(scale).zeros_like(quant_math.stop_gradient(scale))
            return quant_math.AffineGrid(scale, zero, qmin, qmax, self.channel_axis)
        levels = 2 ** n - 1
        scale = quant_math.clip_below(variables["scale"], MIN_THRESHOLD / levels)
        z = quant_math.namespace_of(scale).clip(variables["zero_point"], 0, levels)  # no gradient where it clamps
        z = quant_math.straight_through(z, quant_math.round_to_integers(z))
        return quant_math.AffineGrid(scale, z, 0, levels, self.channel_axis)

    def scale_gradient_factor(self, x_shape: Sequence[int], grid: quant_math.AffineGrid) -> float:
        """The scale gradient's factor: LSQ's 1 / sqrt(N * Q_max) over the elements sharing one scale (per
        channel for weights, one sample's tensor for activations); 1 for STE."""
        if not self.learn_rounding:
            return 1.0
        if self.for_weights:
            n = int(np.prod(x_shape)) // max(int(np.prod(getattr(grid.scale, "shape", ()))), 1)
        else:  # (the batch dimension may be unknown while a backend traces the model)
            n = int(np.prod(x_shape[1:])) if len(x_shape) else 1
        return lsq_gradient_factor(n, grid.qmax)

    def inferable_params_of(self, grid: quant_math.AffineGrid) -> Dict[str, Any]:
        """The quantization parameters (keys of hwquant.constants, python / numpy values) of ``grid``."""
        s = quant_math._to_numpy(grid.scale).astype(np.float64)
        if self.symmetric:
            t = s * 2.0 ** (self.num_bits - 1 if self.signed else self.num_bits)
            return {THRESHOLD: float(t) if t.ndim == 0 else t, SIGNED: self.signed}
        # the exact range of the grid the forward pass used: (q - z) * s at q = 0 and q = 2**n - 1, in
        # float64 (exact for a float32 scale); uniform_grid() turns it back into the same s and z
        z = quant_math._to_numpy(grid.zero_point).astype(np.float64)
        lo, hi = -z * s, (grid.qmax - z) * s
        return {RANGE_MIN: float(lo) if lo.ndim == 0 else lo, RANGE_MAX: float(hi) if hi.ndim == 0 else hi}

    # -------------------------------------------------------------- plain-data round trip
    def get_config(self) -> Dict[str, Any]:
        """Plain data to rebuild this quantizer with ``from_config`` (the learned values travel with the
        model's variables)."""
        return {"quantization_config": self.quantization_config.get_config(),
                "freeze_quant_params": self.freeze_quant_params}

    @classmethod
    def _config_object(cls, config: Dict[str, Any]) -> TrainableConfig:
        if not isinstance(config, dict) or "quantization_config" not in config:
            raise InvalidConfigError(f"{cls.__name__}.from_config expects the dict of get_config(), got {config!r}")
        cfg_cls = (TrainableQuantizerWeightsConfig if cls.quantization_target == QuantizationTarget.Weights
                   else TrainableQuantizerActivationConfig)
        return cfg_cls.from_config(config["quantization_config"])

    def describe(self) -> str:
        axis = f", per-channel axis {self.channel_axis}" if self.channel_axis is not None else ""
        frozen = ", frozen parameters" if self.freeze_quant_params else ""
        return f"{self.identifier.name}, {self.method.name}, {self.num_bits} bits{axis}{frozen}"
