"""The quantized Keras model's blocks, with mct-quantizers' Keras names and attributes, written with
keras.ops (any backend) and registered as Keras serializables (a `.keras` file reloads them):

- inferable quantizers (`ActivationPOTInferableQuantizer`, `WeightsSymmetricInferableQuantizer`, ...):
  num_bits, threshold / threshold_np, signed, per_channel, channel_axis, min_range / max_range,
  quantization_method; calling one fake-quantizes onto hwquant's grid (core/numerics/quant_math conventions,
  round half to even);
  `get_config()` returns mct-quantizers' keys for each class (num_bits, threshold, signed, per_channel,
  channel_axis, input_rank, min_range, max_range, lut_values, ...); `from_config` also reads the keys
  earlier hwquant versions saved (method, num_bits, params, channel_axis, target);
- `KerasActivationQuantizationHolder(activation_holder_quantizer)`: quantizes the tensor it receives;
  `convert_to_inferable_quantizers()` turns a trainable quantizer into its inferable one;
- `KerasQuantizationWrapper(layer, weights_quantizers)`: a weighted layer with its weight quantizers.
  The inner layer holds the quantized weights (PTQ's output is constant), so the wrapper computes
  exactly what the inner layer computes; `get_quantized_weights()`, `get_weights_vars()`,
  `set_quantize_weights()` and `convert_to_inferable_quantizers()` as in mct-quantizers.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import keras
import numpy as np
from keras import ops

from hwquant.constants import LUT_VALUES, LUT_VALUES_BITWIDTH, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core.numerics import quant_math
from hwquant.exporter.quantizer_spec import MCTQ_KINDS
from hwquant.tpc.enums import QuantizationMethod

_PACKAGE = "hwquant"


class KerasInferableQuantizer:
    """A fixed quantizer: ``method``, ``num_bits``, ``params`` (hwquant.constants keys), ``channel_axis``
    (per-channel along it, else per tensor) and ``target`` ('weights' / 'activation')."""

    def __init__(self, method: Any, num_bits: int, params: Dict[str, Any], channel_axis: Optional[int] = None,
                 target: str = "activation", input_rank: Optional[int] = None):
        self.quantization_method = self.method = QuantizationMethod(method)
        self.input_rank = input_rank  # the rank of the tensor quantized (weights: set by the wrapper holding it)
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
        """mct-quantizers' configuration of this class (its keys, plain JSON values): what MCT's Keras code
        reads (``get_config()['threshold'][0]``, ``['num_bits']``) and what a `.keras` file stores."""
        return mctq_config(self)

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "KerasInferableQuantizer":
        """The quantizer of a configuration: mct-quantizers' keys (``get_config()``), or the keys earlier
        hwquant versions saved (method, num_bits, params, channel_axis, target)."""
        if "params" in config:
            return cls(**config)
        method, target = _CLASS_KIND.get(cls, (None, None))
        if method is None:
            raise ValueError(f"{cls.__name__}.from_config needs hwquant's keys (method, num_bits, params, ...): the "
                             "class does not name a quantization method")
        params, axis = params_of_mctq_config(method, target, config)
        return cls(method, config["num_bits"], params, axis, target, config.get("input_rank"))

    def __repr__(self) -> str:
        axis = f", per-channel axis {self.channel_axis}" if self.per_channel else ""
        return f"{type(self).__name__}({self.method.name}, {self.num_bits} bits{axis})"


# mct-quantizers' defaults of the lookup-table quantizers' fields hwquant does not use otherwise
_LUT_EPS = 1e-8


def _floats(value: Any) -> list:
    return [float(v) for v in np.atleast_1d(np.asarray(value, np.float64)).ravel()]


def mctq_config(q: KerasInferableQuantizer) -> Dict[str, Any]:
    """The keys and values mct-quantizers' Keras class of the same name returns from ``get_config()``
    (thresholds and ranges as lists; activations per tensor, a list of one). A field mct-quantizers has
    no key for is added only where it differs from what mct-quantizers assumes (an unsigned weight grid)."""
    p, lut = q.params, q.method in (QuantizationMethod.LUT_POT_QUANTIZER, QuantizationMethod.LUT_SYM_QUANTIZER)
    bits = int(p.get(quant_math.LUT_VALUES_BITWIDTH_KEY, LUT_VALUES_BITWIDTH))
    if q.target == "activation":
        if q.method == QuantizationMethod.UNIFORM:
            return {"num_bits": q.num_bits, "min_range": _floats(p[RANGE_MIN]), "max_range": _floats(p[RANGE_MAX])}
        if lut:
            return {"num_bits": q.num_bits, "lut_values": _floats(p[LUT_VALUES]), "threshold": _floats(p[THRESHOLD]),
                    "signed": q.signed, "lut_values_bitwidth": bits, "eps": _LUT_EPS}
        return {"num_bits": q.num_bits, "signed": q.signed, "threshold": _floats(p[THRESHOLD])}
    where = {"per_channel": q.per_channel, "channel_axis": q.channel_axis, "input_rank": q.input_rank}
    if q.method == QuantizationMethod.UNIFORM:
        config = {"per_channel": q.per_channel, "num_bits": q.num_bits, "max_range": _floats(p[RANGE_MAX]),
                  "min_range": _floats(p[RANGE_MIN]), **where}
    elif lut:
        config = {"per_channel": q.per_channel, "num_bits": q.num_bits, "lut_values": _floats(p[LUT_VALUES]),
                  "threshold": _floats(p[THRESHOLD]), **where, "lut_values_bitwidth": bits, "eps": _LUT_EPS}
    else:
        config = {"num_bits": q.num_bits, "threshold": _floats(p[THRESHOLD]), **where}
    if p.get(SIGNED) is False:  # (mct-quantizers' weight grids are signed)
        config["signed"] = False
    return config


def params_of_mctq_config(method: QuantizationMethod, target: str, config: Dict[str, Any]) -> tuple:
    """(hwquant's params dict, channel axis or None) of an mct-quantizers configuration."""
    def value(key: str) -> Any:
        if key not in config:
            raise ValueError(f"a {method.name} {target} quantizer's configuration needs '{key}', got keys {sorted(config)}")
        v = np.atleast_1d(np.asarray(config[key], np.float64)).ravel()
        return float(v[0]) if v.size == 1 and not per_channel else v

    per_channel = bool(config.get("per_channel", False)) and target == "weights"
    params: Dict[str, Any] = {}
    if method == QuantizationMethod.UNIFORM:
        params[RANGE_MIN], params[RANGE_MAX] = value("min_range"), value("max_range")
    else:
        params[THRESHOLD] = value("threshold")
        if method in (QuantizationMethod.LUT_POT_QUANTIZER, QuantizationMethod.LUT_SYM_QUANTIZER):
            params[LUT_VALUES] = np.asarray(config["lut_values"], np.float64).astype(np.int64)
            bits = int(config.get("lut_values_bitwidth", LUT_VALUES_BITWIDTH))
            if bits != LUT_VALUES_BITWIDTH:
                params[quant_math.LUT_VALUES_BITWIDTH_KEY] = bits
        if "signed" in config:
            params[SIGNED] = bool(config["signed"])
    axis = config.get("channel_axis") if per_channel else None
    return params, (None if axis is None else int(axis))


QUANTIZER_CLASSES: Dict[tuple, type] = {}
_CLASS_KIND: Dict[type, tuple] = {}  # class -> (method, target)
for _target in ("weights", "activation"):
    for _method, _kind in MCTQ_KINDS.items():
        _name = f"{_target.capitalize()}{_kind}InferableQuantizer"
        _cls = type(_name, (KerasInferableQuantizer,), {"__module__": __name__,
                                                        "__doc__": f"{_name} (mct-quantizers' Keras name)."})
        QUANTIZER_CLASSES[(_target, _method)] = keras.saving.register_keras_serializable(_PACKAGE)(_cls)
        _CLASS_KIND[_cls] = (_method, _target)
        globals()[_name] = QUANTIZER_CLASSES[(_target, _method)]
# mct-quantizers' spellings of two names
ActivationLutPOTInferableQuantizer = QUANTIZER_CLASSES[("activation", QuantizationMethod.LUT_POT_QUANTIZER)]
BaseKerasInferableQuantizer = KerasInferableQuantizer


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

    def convert_to_inferable_quantizers(self) -> "KerasActivationQuantizationHolder":
        """As mct-quantizers' holder: a trainable quantizer is replaced, in place, by its inferable
        conversion (the same outputs in inference); returns a new holder of that quantizer, without the
        trainable quantizer's variables (this layer keeps them, unused), for a model to be built with."""
        if _trainable(self.activation_holder_quantizer):
            self.activation_holder_quantizer = self.activation_holder_quantizer.convert_to_inferable_quantizers()
        return type(self).from_config(self.get_config())

    def get_config(self):
        return {**super().get_config(),
                "activation_holder_quantizer": keras.saving.serialize_keras_object(self.activation_holder_quantizer)}


def strided_pointwise_on_torch(layer: Any) -> bool:
    """A 1x1 Conv2D with strides, on Keras' torch backend: torch 2.13's CPU backward of such a convolution
    over a channels-last input (what Keras' torch backend hands it) crashes the process, so layers that
    train compute it as :func:`_subsampled_pointwise` (the same function)."""
    return (keras.backend.backend() == "torch" and type(layer) is keras.layers.Conv2D
            and tuple(layer.kernel_size) == (1, 1) and any(s > 1 for s in layer.strides)
            and tuple(layer.dilation_rate) == (1, 1) and layer.groups == 1 and layer.data_format == "channels_last")


def _subsampled_pointwise(layer: Any, inputs: Any) -> Any:
    """A strided 1x1 convolution as subsampling, then a 1x1 convolution: the same products and sums ('same'
    padding adds nothing to a 1x1 kernel)."""
    sh, sw = layer.strides
    y = ops.conv(inputs[:, ::sh, ::sw, :], layer.kernel, strides=1, padding="valid", data_format="channels_last")
    if layer.use_bias:
        y = ops.add(y, layer.bias)
    return layer.activation(y) if layer.activation is not None else y


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
        self._set_input_ranks()

    def _set_input_ranks(self) -> None:
        weights = self._layer_weights()
        for attr, q in self.weights_quantizers.items():
            if isinstance(q, KerasInferableQuantizer) and attr in weights:
                q.input_rank = len(weights[attr].shape)

    def call(self, inputs, *args, training=None, **kwargs):
        trainable = self._trainable_quantizers()
        if not trainable and self.weights_quantizers:
            return self._call_layer(inputs, args, kwargs)
        # trainable (or a float layer wrapped for training: GPTQ's teacher): the layer may be differentiated
        weights = self._layer_weights()
        quantized = [(weights[attr], q(weights[attr], training=training)) for attr, q in trainable.items()]
        with keras.StatelessScope(state_mapping=quantized):
            if strided_pointwise_on_torch(self.layer):
                return _subsampled_pointwise(self.layer, inputs)
            return self._call_layer(inputs, args, kwargs)

    def _call_layer(self, inputs, args, kwargs):
        if keras.backend.backend() == "torch" and not args and not kwargs:
            from hwquant.keras import torch_layers  # (Keras' convolution without its layout copies)
            if torch_layers.handles(self.layer, inputs):
                return torch_layers.call(self.layer, inputs)
        return self.layer(inputs, *args, **kwargs)

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)

    def get_quantized_weights(self) -> Dict[str, Any]:
        """{weight name: quantized weight} of every quantized weight: the layer's variable for a fixed
        quantizer (it holds the quantized values), the quantizer's inference output for a trainable one."""
        weights = self._layer_weights()
        return {k: (q(weights[k].value, training=False) if _trainable(q) else weights[k])
                for k, q in self.weights_quantizers.items() if k in weights}

    def get_weights_vars(self) -> List[Tuple[str, Any, Any]]:
        """mct-quantizers' list of (weight name, the layer's variable, its quantizer) for every quantized
        weight. The variable holds the quantized values for a fixed quantizer, the float ones (trained)
        for a trainable quantizer."""
        weights = self._layer_weights()
        missing = [k for k in self.weights_quantizers if k not in weights]
        if missing:
            raise ValueError(f"'{self.name}': the wrapped layer has no weight {missing} (is it built? its weights: "
                             f"{list(weights)})")
        return [(k, weights[k], q) for k, q in self.weights_quantizers.items()]

    def set_quantize_weights(self, quantized_weights: Dict[str, Any]) -> None:
        """Write quantized weights ({weight name: values}) into the wrapped layer, as mct-quantizers'
        wrapper does: each name must be one the wrapper quantizes, each value of the weight's shape."""
        weights = self._layer_weights()
        unknown = [k for k in quantized_weights if k not in self.weights_quantizers or k not in weights]
        if unknown:
            raise KeyError(f"'{self.name}' quantizes the weights {list(self.weights_quantizers)}, not {unknown}")
        values = {k: np.asarray(ops.convert_to_numpy(v), weights[k].dtype) for k, v in quantized_weights.items()}
        for k, value in values.items():
            if value.shape != tuple(weights[k].shape):
                raise ValueError(f"'{self.name}': weight '{k}' has shape {tuple(weights[k].shape)}, the value given "
                                 f"{value.shape}")
        for k, value in values.items():
            weights[k].assign(value)

    def convert_to_inferable_quantizers(self) -> "KerasQuantizationWrapper":
        """As mct-quantizers' wrappers: every trainable weight quantizer is replaced, in place, by its
        inferable conversion and its weight by the quantized values it gives in inference (so this layer
        computes what the trained one computed in inference); returns a new wrapper of those quantizers
        and weights, without the trainable quantizers' variables (this layer keeps them, unused)."""
        trainable = self._trainable_quantizers()
        converted = {k: q.convert_to_inferable_quantizers() for k, q in trainable.items()}  # (all, before any change)
        weights = self._layer_weights()
        quantized = {k: ops.convert_to_numpy(q(weights[k].value, training=False)) for k, q in trainable.items()}
        for k, value in quantized.items():
            weights[k].assign(value)
        self.weights_quantizers = {**self.weights_quantizers, **converted}
        self._set_input_ranks()
        inner = type(self.layer).from_config(self.layer.get_config())
        new = type(self)(inner, dict(self.weights_quantizers), name=self.name)
        if self.built:
            new.build_from_config(self.get_build_config())
            new.layer.set_weights([ops.convert_to_numpy(weights[k].value) for k in new._layer_weights()])
        return new

    def get_config(self):
        return {**super().get_config(), "weights_quantizers": {
            k: keras.saving.serialize_keras_object(q) for k, q in self.weights_quantizers.items()}}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        layer = keras.saving.deserialize_keras_object(config.pop("layer"))
        return cls(layer, **config)
