"""FrameworkInfo: what the core needs to know about a framework's layers to quantize a model: lists of
layers by how they are quantized (kernel_ops, e.g. Conv2D; activation_ops, e.g. ReLU; no_quantization_ops,
e.g. Reshape) and per-layer mappings (quantizer functions, kernel channel axes, weights to quantize,
output channel axis, (min, max) output values, a bound of None being unbounded on that side).
Each framework adapter provides its own instance; this module is framework-free.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Dict, Optional, Tuple

from hwquant.core.configuration.config import DefaultDict
from hwquant.tpc.enums import QuantizationMethod
from hwquant.tpc.schema import bind_positional

__all__ = ["FrameworkInfo"]

# MCT's eight-argument order (older releases).
_FIELDS = ("kernel_ops", "activation_ops", "no_quantization_ops", "activation_quantizer_mapping",
           "weights_quantizer_mapping", "kernel_channels_mapping", "activation_min_max_mapping",
           "layer_min_max_mapping")
# The seed documents build FrameworkInfo with six positional arguments and no quantizer mappings.
_SEED_FIELDS = ("kernel_ops", "activation_ops", "no_quantization_ops", "kernel_channels_mapping",
                "activation_min_max_mapping", "layer_min_max_mapping")
# MCT 2.6's six named mappings: the kernel ops are the keys of kernel_ops_attributes_mapping.
_MAPPING_FIELDS = ("activation_quantizer_mapping", "kernel_channels_mapping", "activation_min_max_mapping",
                   "layer_min_max_mapping", "kernel_ops_attributes_mapping", "out_channel_axis_mapping")
_ALL_FIELDS = _FIELDS + _MAPPING_FIELDS[4:]


def _ops_list(name: str, v: Any) -> list:
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"FrameworkInfo {name} must be a list (or tuple) of layer types, got {type(v).__name__}")
    return list(v)


def _quantizer_mapping(name: str, v: Any) -> Dict[QuantizationMethod, Callable]:
    if not isinstance(v, dict):
        raise TypeError(f"FrameworkInfo {name} must be a dict QuantizationMethod -> quantizer function, "
                        f"got {type(v).__name__}")
    out = {}
    for k, fn in v.items():
        try:
            method = QuantizationMethod(k) if not isinstance(k, bool) else None
        except ValueError:
            method = None
        if method is None:
            raise ValueError(f"FrameworkInfo {name}: key {k!r} is not a QuantizationMethod")
        if not callable(fn):
            raise TypeError(f"FrameworkInfo {name}[{method.name}] must be callable, got {fn!r}")
        out[method] = fn
    return out


def _default_dict(name: str, v: Any, what: str, check: Callable[[Any], bool]) -> DefaultDict:
    v = DefaultDict(v) if isinstance(v, dict) else v
    if not isinstance(v, DefaultDict):
        raise TypeError(f"FrameworkInfo {name} must be a DefaultDict (or dict) layer -> {what}, got {type(v).__name__}")
    default = [] if v.default_value is None else [("<default>", v.default_value)]  # None: no default
    for key, value in [*v.items(), *default]:
        if not check(value):
            raise ValueError(f"FrameworkInfo {name}[{key!r}] must be {what}, got {value!r}")
    return v


def _axis_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool))


def _min_max_mapping(name: str, v: Any) -> dict:
    if not isinstance(v, dict):
        raise TypeError(f"FrameworkInfo {name} must be a dict -> (min, max), got {type(v).__name__}")
    for key, mm in v.items():
        bounds_ok = isinstance(mm, tuple) and len(mm) == 2 and all(
            b is None or (isinstance(b, numbers.Real) and not isinstance(b, bool) and not math.isnan(b))
            for b in mm)
        if not bounds_ok:
            raise ValueError(f"FrameworkInfo {name}[{key!r}] must be a tuple (min, max) of numbers or None, "
                             f"got {mm!r}")
        if mm[0] is not None and mm[1] is not None and mm[0] > mm[1]:
            raise ValueError(f"FrameworkInfo {name}[{key!r}] = {mm!r}: min must be <= max")
    return dict(v)


class FrameworkInfo:
    """Layer groups and per-layer facts of one framework (see the module docstring).

    Three forms: MCT 2.6's named mappings ``FrameworkInfo(activation_quantizer_mapping,
    kernel_channels_mapping, activation_min_max_mapping, layer_min_max_mapping,
    kernel_ops_attributes_mapping, out_channel_axis_mapping)`` (a dict first); MCT's older eight
    arguments ``FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, activation_quantizer_mapping,
    weights_quantizer_mapping, kernel_channels_mapping, activation_min_max_mapping, layer_min_max_mapping)``;
    the seed's six ``FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops,
    kernel_channels_mapping, activation_min_max_mapping, layer_min_max_mapping)``. Any argument may be
    given by name.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        # A mapping first is MCT 2.6's form; exactly six positional layer lists / mappings is the seed's;
        # anything else binds positionally in MCT's eight-argument order.
        names: Tuple[str, ...]
        if args and isinstance(args[0], dict):
            names = _MAPPING_FIELDS
        else:
            names = _SEED_FIELDS if len(args) == len(_SEED_FIELDS) else _FIELDS
        values = bind_positional("FrameworkInfo", names, args, kwargs)
        for k in kwargs:
            if k not in _ALL_FIELDS:
                raise TypeError(f"FrameworkInfo got an unexpected argument '{k}'; valid: {', '.join(_ALL_FIELDS)}")
        missing = [k for k in ("kernel_channels_mapping",) if k not in values]
        if "kernel_ops" not in values and "kernel_ops_attributes_mapping" not in values:
            missing.insert(0, "kernel_ops (or kernel_ops_attributes_mapping)")
        if missing:
            raise TypeError(f"FrameworkInfo is missing required argument(s): {', '.join(missing)}")

        attributes = values.get("kernel_ops_attributes_mapping")
        self.kernel_ops_attributes_mapping = _default_dict(
            "kernel_ops_attributes_mapping", attributes if attributes is not None else DefaultDict({}, [None]),
            "a list of weight attribute names (or None)",
            lambda v: v is None or isinstance(v, (list, tuple)) and all(a is None or (isinstance(a, str) and a) for a in v))
        self.kernel_ops = _ops_list("kernel_ops", values["kernel_ops"] if "kernel_ops" in values
                                    else list(self.kernel_ops_attributes_mapping.keys()))
        self.activation_ops = _ops_list("activation_ops", values.get("activation_ops", []))
        self.no_quantization_ops = _ops_list("no_quantization_ops", values.get("no_quantization_ops", []))
        self.out_channel_axis_mapping = _default_dict(
            "out_channel_axis_mapping", values.get("out_channel_axis_mapping", DefaultDict({}, None)),
            "an axis (int) or None", _axis_or_none)
        self.activation_quantizer_mapping = _quantizer_mapping(
            "activation_quantizer_mapping", values.get("activation_quantizer_mapping", {}))
        self.weights_quantizer_mapping = _quantizer_mapping(
            "weights_quantizer_mapping", values.get("weights_quantizer_mapping", {}))
        self.kernel_channels_mapping = _default_dict(
            "kernel_channels_mapping", values["kernel_channels_mapping"],
            "a tuple (out_channel_axis, in_channel_axis) of ints (or None)",
            lambda v: isinstance(v, tuple) and len(v) == 2 and all(_axis_or_none(c) for c in v))
        self.activation_min_max_mapping = _min_max_mapping("activation_min_max_mapping",
                                                           values.get("activation_min_max_mapping", {}))
        self.layer_min_max_mapping = _min_max_mapping("layer_min_max_mapping", values.get("layer_min_max_mapping", {}))
        overlap = [t for t in self.no_quantization_ops if t in self.kernel_ops or t in self.activation_ops]
        if overlap:
            raise ValueError(f"FrameworkInfo: {overlap!r} listed in no_quantization_ops and also in kernel_ops or "
                             f"activation_ops; a layer cannot be both quantized and not quantized")

    def is_kernel_op(self, t: Any) -> bool:
        return t in self.kernel_ops

    def is_activation_op(self, t: Any) -> bool:
        return t in self.activation_ops

    def is_no_quantization_op(self, t: Any) -> bool:
        return t in self.no_quantization_ops

    def get_kernel_op_attributes(self, t: Any) -> list:
        """Names of the layer's weights to quantize ([None] when the mapping does not know the layer)."""
        return self.kernel_ops_attributes_mapping.get(t)

    def get_out_channel_axis(self, t: Any) -> Optional[int]:
        """Axis of the layer's output channels (None when unknown)."""
        return self.out_channel_axis_mapping.get(t)

    def get_kernel_channels(self, t: Any) -> Optional[Tuple[Optional[int], Optional[int]]]:
        """(out_channel_axis, in_channel_axis) of the layer's kernel; the mapping's default when unknown."""
        return self.kernel_channels_mapping.get(t)

    def layers_has_min_max(self, t: Any) -> bool:
        return t in self.layer_min_max_mapping

    def get_layer_min_max(self, t: Any) -> Tuple[Optional[float], Optional[float]]:
        if t not in self.layer_min_max_mapping:
            raise KeyError(f"layer {t!r} has no known min/max output values; check layers_has_min_max first")
        return self.layer_min_max_mapping[t]

    def layer_output_range(self, t: Any) -> Optional[Tuple[Optional[float], Optional[float]]]:
        """The layer's (min, max) output values; None when unknown (an unhashable node type too)."""
        try:
            return self.layer_min_max_mapping.get(t)
        except TypeError:  # an unhashable node type
            return None

    def activation_has_min_max(self, activation_name: str) -> bool:
        return activation_name in self.activation_min_max_mapping

    def get_activation_min_max(self, activation_name: str) -> Tuple[Optional[float], Optional[float]]:
        if activation_name not in self.activation_min_max_mapping:
            raise KeyError(f"activation {activation_name!r} has no known min/max output values; "
                           f"check activation_has_min_max first")
        return self.activation_min_max_mapping[activation_name]

    def __repr__(self) -> str:
        return (f"FrameworkInfo(kernel_ops={self.kernel_ops!r}, activation_ops={self.activation_ops!r}, "
                f"no_quantization_ops={self.no_quantization_ops!r}, kernel_channels_mapping="
                f"{self.kernel_channels_mapping!r})")
