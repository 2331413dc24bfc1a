"""FrameworkInfo: what the core needs to know about a framework's layers to quantize a model.

It holds lists of layers by how they should be quantized (kernel_ops: layers with coefficients to
quantize, e.g. Conv2D, Dense; activation_ops: layers whose outputs are quantized, e.g. Add, ReLU;
no_quantization_ops: layers left alone, e.g. Reshape, Transpose) and mappings: quantization method ->
quantizer function for activations and weights; layer -> (out, in) kernel channel indices (a DefaultDict);
activation function name -> (min, max) output values, e.g. {'softmax': (0, 1)}; layer -> (min, max)
output values, e.g. {Softmax: (0, 1)}. A bound of None means unbounded on that side.
Each framework adapter provides its own instance; this module is framework-free.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Dict, Optional, Tuple

from hwquant.core.config import DefaultDict
from hwquant.tpc.enums import QuantizationMethod

__all__ = ["FrameworkInfo"]

_FIELDS = ("kernel_ops", "activation_ops", "no_quantization_ops", "activation_quantizer_mapping",
           "weights_quantizer_mapping", "kernel_channels_mapping", "activation_min_max_mapping",
           "layer_min_max_mapping")
# The seed documents build FrameworkInfo with six positional arguments and no quantizer mappings.
_SEED_FIELDS = ("kernel_ops", "activation_ops", "no_quantization_ops", "kernel_channels_mapping",
                "activation_min_max_mapping", "layer_min_max_mapping")
_REQUIRED = ("kernel_ops", "activation_ops", "no_quantization_ops", "kernel_channels_mapping")


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


def _channels(name: str, key: Any, v: Any) -> None:
    ok = isinstance(v, tuple) and len(v) == 2 and all(
        c is None or (isinstance(c, numbers.Integral) and not isinstance(c, bool)) for c in v)
    if not ok:
        raise ValueError(f"FrameworkInfo {name}[{key!r}] must be a tuple (out_channel_axis, in_channel_axis) "
                         f"of ints (or None), got {v!r}")


def _kernel_channels(name: str, v: Any) -> DefaultDict:
    if isinstance(v, dict):
        v = DefaultDict(v)
    if not isinstance(v, DefaultDict):
        raise TypeError(f"FrameworkInfo {name} must be a DefaultDict (or dict) layer -> (out, in) channel axes, "
                        f"got {type(v).__name__}")
    for key, axes in v.items():
        _channels(name, key, axes)
    if v.default_value is not None:
        _channels(name, "<default>", v.default_value)
    return v


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

    ``FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, activation_quantizer_mapping,
    weights_quantizer_mapping, kernel_channels_mapping, activation_min_max_mapping, layer_min_max_mapping)``,
    or the seed's six-argument form ``FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops,
    kernel_channels_mapping, activation_min_max_mapping, layer_min_max_mapping)``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        # Exactly six positional arguments is the seed's form (no quantizer mappings); anything else
        # binds positionally in MCT's eight-argument order.
        names = _SEED_FIELDS if len(args) == len(_SEED_FIELDS) else _FIELDS
        if len(args) > len(_FIELDS):
            raise TypeError(f"FrameworkInfo takes at most {len(_FIELDS)} arguments ({', '.join(_FIELDS)}), "
                            f"got {len(args)}")
        values = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in _FIELDS:
                raise TypeError(f"FrameworkInfo got an unexpected argument '{k}'; valid: {', '.join(_FIELDS)}")
            if k in values:
                raise TypeError(f"FrameworkInfo got two values for '{k}'")
            values[k] = v
        missing = [k for k in _REQUIRED if k not in values]
        if missing:
            raise TypeError(f"FrameworkInfo is missing required argument(s): {', '.join(missing)}")

        self.kernel_ops = _ops_list("kernel_ops", values["kernel_ops"])
        self.activation_ops = _ops_list("activation_ops", values["activation_ops"])
        self.no_quantization_ops = _ops_list("no_quantization_ops", values["no_quantization_ops"])
        self.activation_quantizer_mapping = _quantizer_mapping(
            "activation_quantizer_mapping", values.get("activation_quantizer_mapping", {}))
        self.weights_quantizer_mapping = _quantizer_mapping(
            "weights_quantizer_mapping", values.get("weights_quantizer_mapping", {}))
        self.kernel_channels_mapping = _kernel_channels("kernel_channels_mapping",
                                                        values["kernel_channels_mapping"])
        self.activation_min_max_mapping = _min_max_mapping("activation_min_max_mapping",
                                                           values.get("activation_min_max_mapping", {}))
        self.layer_min_max_mapping = _min_max_mapping("layer_min_max_mapping",
                                                      values.get("layer_min_max_mapping", {}))
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

    def get_kernel_channels(self, t: Any) -> Optional[Tuple[Optional[int], Optional[int]]]:
        """(out_channel_axis, in_channel_axis) of the layer's kernel; the mapping's default when unknown."""
        return self.kernel_channels_mapping.get(t)

    def layers_has_min_max(self, t: Any) -> bool:
        return t in self.layer_min_max_mapping

    def get_layer_min_max(self, t: Any) -> Tuple[Optional[float], Optional[float]]:
        if t not in self.layer_min_max_mapping:
            raise KeyError(f"layer {t!r} has no known min/max output values; check layers_has_min_max first")
        return self.layer_min_max_mapping[t]

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
