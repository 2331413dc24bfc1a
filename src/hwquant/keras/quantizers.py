"""The quantized Keras model's blocks, with mct-quantizers' Keras names and attributes, written with
keras.ops (any backend) and registered as Keras serializables (a `.keras` file reloads them):

- inferable quantizers (`ActivationPOTInferableQuantizer`, `WeightsSymmetricInferableQuantizer`, ...):
  num_bits, threshold / threshold_np, signed, per_channel, channel_axis, min_range / max_range,
  quantization_method; calling one fake-quantizes onto hwquant's grid (core/quant_math conventions,
  round half to even);
- `KerasActivationQuantizationHolder(activation_holder_quantizer)`: quantizes the tensor it receives;
- `KerasQuantizationWrapper(layer, weights_quantizers)`: a weighted layer with its weight quantizers.
  The inner layer holds the quantized weights (PTQ's output is constant), so the wrapper computes
  exactly what the inner layer computes; `get_quantized_weights()` reads them.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import keras
import numpy as np
from keras import ops

from hwquant.core import quant_math
from hwquant.exporter.quantizer_spec import MCTQ_KINDS
from hwquant.tpc.enums import QuantizationMethod

_PACKAGE = "hwquant"


class KerasInferableQuantizer:
    """A fixed quantizer: ``method``, ``num_bits``, ``params`` (hwquant.constants keys), ``channel_axis``
    (per-channel along it, else per tensor) and ``target`` ('weights' / 'activation')."""

    def __init__(self, method: Any, num_bits: int, params: Dict[str, Any], channel_axis: Optional[int] = None,
                 target: str = "activation"):
        self.quantization_method = self.method = QuantizationMethod(method)
        self.num_bits = int(num_bits)
        self.params = {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in params.items()}
        self.channel_axis = channel_axis
        self.per_channel = channel_axis is not None
        self.target = target
        self.grid = quant_math.make_grid(self.method, self.num_bits, params, axis=channel_axis)
        threshold = params.get("threshold")
        if threshold is not None:
            self.threshold_np = np.atleast_1d(np.asarray(threshold, np.float64))
            self.threshold = self.threshold_np.tolist()
        self.signed = bool(params.get("is_signed", True)) if target == "activation" else True
        if self.method == QuantizationMethod.UNIFORM:
            self.min_range = np.atleast_1d(np.asarray(params["range_min"], np.float64)).tolist()
            self.max_range = np.atleast_1d(np.asarray(params["range_max"], np.float64)).tolist()
        if isinstance(self.grid, quant_math.LutGrid):
            self.lut_values = np.asarray(self.grid.lut_values).tolist()

    def __call__(self, x: Any) -> Any:
        if isinstance(self.grid, quant_math.LutGrid):
            if self.target != "weights":
                raise NotImplementedError("lookup-table activation quantizers are not available in Keras")
            return ops.convert_to_tensor(quant_math.fake_quantize(np.asarray(ops.convert_to_numpy(x)), self.grid))
        return quant_math.fake_quantize(x, self.grid)

    def get_config(self) -> Dict[str, Any]:
        return {"method": int(self.method), "num_bits": self.num_bits, "params": self.params,
                "channel_axis": self.channel_axis, "target": self.target}

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "KerasInferableQuantizer":
        return cls(**config)

    def __repr__(self) -> str:
        axis = f", per-channel axis {self.channel_axis}" if self.per_channel else ""
        return f"{type(self).__name__}({self.method.name}, {self.num_bits} bits{axis})"


QUANTIZER_CLASSES: Dict[tuple, type] = {}
for _target in ("weights", "activation"):
    for _method, _kind in MCTQ_KINDS.items():
        _name = f"{_target.capitalize()}{_kind}InferableQuantizer"
        _cls = type(_name, (KerasInferableQuantizer,), {"__module__": __name__,
                                                        "__doc__": f"{_name} (mct-quantizers' Keras name)."})
        QUANTIZER_CLASSES[(_target, _method)] = keras.saving.register_keras_serializable(_PACKAGE)(_cls)
        globals()[_name] = QUANTIZER_CLASSES[(_target, _method)]


def make_quantizer(method: Any, num_bits: int, params: Dict[str, Any], channel_axis: Optional[int] = None,
                   target: str = "activation") -> KerasInferableQuantizer:
    return QUANTIZER_CLASSES[(target, QuantizationMethod(method))](method, num_bits, params, channel_axis, target)


def _quantizer_from(config: Any) -> Any:
    """A quantizer object, or the one its serialized config describes."""
    return keras.saving.deserialize_keras_object(config) if isinstance(config, dict) else config


def _trainable(quantizer: Any) -> bool:
    """A trainable quantizer (keras/trainable/base.py) creates its variables on the layer holding it."""
    return hasattr(quantizer, "initialize_quantization")


@keras.saving.register_keras_serializable(_PACKAGE)
class KerasActivationQuantizationHolder(keras.layers.Layer):
    """Quantizes its input with ``activation_holder_quantizer`` (a trainable one keeps its variables on
    this layer)."""

    def __init__(self, activation_holder_quantizer: Any, **kwargs):
        super().__init__(**kwargs)
        self.activation_holder_quantizer = _quantizer_from(activation_holder_quantizer)

    def build(self, input_shape):
        if _trainable(self.activation_holder_quantizer):
            self.activation_holder_quantizer.initialize_quantization(input_shape, "", self)

    def call(self, inputs, training=None):
        if _trainable(self.activation_holder_quantizer):
            return self.activation_holder_quantizer(inputs, training=training)
        return self.activation_holder_quantizer(inputs)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(),
                "activation_holder_quantizer": keras.saving.serialize_keras_object(self.activation_holder_quantizer)}


@keras.saving.register_keras_serializable(_PACKAGE)
class KerasQuantizationWrapper(keras.layers.Wrapper):
    """A weighted layer and its weight quantizers ({weight name: quantizer}). The layer holds the
    quantized weights of fixed quantizers, and the float weights of trainable ones (QAT, GPTQ): those
    are quantized at every call and handed to the layer through a ``keras.StatelessScope``, so the
    layer's own computation runs unchanged and its float weights receive the gradients."""

    def __init__(self, layer: Any, weights_quantizers: Optional[Dict[str, Any]] = None, **kwargs):
        super().__init__(layer, **kwargs)
        self.weights_quantizers = {k: _quantizer_from(v) for k, v in (weights_quantizers or {}).items()}

    def _layer_weights(self) -> Dict[str, Any]:
        from hwquant.keras.builder import weight_keys
        return dict(zip(weight_keys(self.layer), self.layer.weights))

    def _trainable_quantizers(self) -> Dict[str, Any]:
        return {k: q for k, q in self.weights_quantizers.items() if _trainable(q)}

    def build(self, input_shape=None):
        super().build(input_shape)
        weights = self._layer_weights()
        for attr, q in self._trainable_quantizers().items():
            q.initialize_quantization(tuple(weights[attr].shape), attr, self)

    def call(self, inputs, *args, training=None, **kwargs):
        trainable = self._trainable_quantizers()
        if not trainable:
            return self.layer(inputs, *args, **kwargs)
        weights = self._layer_weights()
        quantized = [(weights[attr], q(weights[attr], training=training)) for attr, q in trainable.items()]
        with keras.StatelessScope(state_mapping=quantized):
            return self.layer(inputs, *args, **kwargs)

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)

    def get_quantized_weights(self) -> Dict[str, Any]:
        from hwquant.keras.builder import weight_keys
        return {k: w for k, w in zip(weight_keys(self.layer), self.layer.weights) if k in self.weights_quantizers}

    def get_config(self):
        return {**super().get_config(), "weights_quantizers": {
            k: keras.saving.serialize_keras_object(q) for k, q in self.weights_quantizers.items()}}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        layer = keras.saving.deserialize_keras_object(config.pop("layer"))
        return cls(layer, **config)
