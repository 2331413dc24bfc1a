"""Inferable quantizers (fake-quantization modules) and the modules that place them in a model.

A quantizer's integer grid comes from `core.quant_math` (one source of rounding and clipping); the
grid's scale and zero point are kept as buffers, so they follow the model across devices and
through `state_dict` / `load_state_dict`. Names follow the documented API:
`PytorchQuantizationWrapper` (a layer with its weight quantizers) and
`PytorchActivationQuantizationHolder` (an activation quantizer after a layer).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch
from torch import nn

from hwquant.constants import LUT_VALUES, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core import quant_math
from hwquant.tpc.enums import QuantizationMethod


class InferableQuantizer(nn.Module):
    """Fake-quantizes a tensor onto a fixed grid (`method`, `num_bits`, `params`).

    `params` holds the quantization parameters in the keys of `hwquant.constants` (threshold and
    signedness, or range_min / range_max, or lut_values); per-channel values run along `channel_axis`.
    """

    def __init__(self, method: QuantizationMethod, num_bits: int, params: Dict[str, Any],
                 channel_axis: Optional[int] = None, target: str = "activation"):
        super().__init__()
        self.method = QuantizationMethod(method)
        self.num_bits = int(num_bits)
        self.channel_axis = channel_axis
        self.target = target
        self.params = {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in params.items()}
        grid = quant_math.make_grid(self.method, self.num_bits, params, axis=channel_axis)
        self._lut = isinstance(grid, quant_math.LutGrid)
        if self._lut:
            self._lut_grid = grid
            self.register_buffer("threshold", torch.as_tensor(np.asarray(grid.threshold, dtype=np.float32)))
            self.register_buffer("lut_values", torch.as_tensor(np.asarray(grid.lut_values, dtype=np.float32)))
        else:
            self.qmin, self.qmax = grid.qmin, grid.qmax
            self.register_buffer("scale", torch.as_tensor(np.asarray(grid.scale, dtype=np.float32)))
            self.register_buffer("zero_point", torch.as_tensor(np.asarray(grid.zero_point, dtype=np.float32)))

    def grid(self):
        if self._lut:
            return self._lut_grid
        return quant_math.AffineGrid(self.scale, self.zero_point, self.qmin, self.qmax, self.channel_axis)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quant_math.fake_quantize(x, self.grid())

    @property
    def per_channel(self) -> bool:
        return self.channel_axis is not None

    def extra_repr(self) -> str:
        what = {QuantizationMethod.UNIFORM: f"range=[{_fmt(self.params.get(RANGE_MIN))}, {_fmt(self.params.get(RANGE_MAX))}]",
                QuantizationMethod.LUT_POT_QUANTIZER: f"{len(self.params.get(LUT_VALUES, []))} values"}
        detail = what.get(self.method, f"threshold={_fmt(self.params.get(THRESHOLD))}")
        signed = "" if self.params.get(SIGNED) is None else (", signed" if self.params[SIGNED] else ", unsigned")
        axis = f", per-channel axis {self.channel_axis}" if self.per_channel else ""
        return f"{self.method.name}, {self.num_bits} bits, {detail}{signed}{axis}"


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return f"[{len(v)} channels]" if len(v) > 3 else "[" + ", ".join(f"{x:.4g}" for x in v) + "]"
    return "?" if v is None else f"{v:.4g}"


class PytorchActivationQuantizationHolder(nn.Module):
    """Holds the activation quantizer applied to a layer's output."""

    def __init__(self, activation_holder_quantizer: InferableQuantizer):
        super().__init__()
        self.activation_holder_quantizer = activation_holder_quantizer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation_holder_quantizer(x)


class PytorchQuantizationWrapper(nn.Module):
    """A layer whose weights pass through their quantizers on every call (so a trainable quantizer
    sees its gradients); the float weights stay in `layer`."""

    def __init__(self, module: nn.Module, weights_quantizers: Dict[str, InferableQuantizer]):
        super().__init__()
        self.layer = module
        self.weights_quantizers = nn.ModuleDict(weights_quantizers)

    def quantized_weights(self) -> Dict[str, torch.Tensor]:
        return {name: q(getattr(self.layer, name)) for name, q in self.weights_quantizers.items()}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        weights = self.quantized_weights()
        if torch.jit.is_tracing():  # the stateless API refuses tracing (TorchScript / ONNX export)
            return _call_with_tensors(self.layer, weights, args, kwargs)
        return torch.func.functional_call(self.layer, weights, args, kwargs, strict=False)


def _call_with_tensors(layer: nn.Module, tensors: Dict[str, torch.Tensor], args: tuple, kwargs: dict) -> Any:
    """Call ``layer`` with some of its parameters replaced by ``tensors``, then put them back (in order)."""
    original = dict(layer._parameters)
    try:
        for name, value in tensors.items():
            layer._parameters.pop(name, None)
            setattr(layer, name, value)
        return layer(*args, **kwargs)
    finally:
        for name in tensors:
            layer.__dict__.pop(name, None)
        layer._parameters.clear()
        layer._parameters.update(original)
