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
import torch.nn.functional as F
from torch import nn

from hwquant.constants import LUT_VALUES, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core import quant_math
from hwquant.core.integer_accumulation import accumulator_bias
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
    sees its gradients); the float weights stay in `layer`.

    With ``input_scale`` (the scale of the per-tensor grid its input lies on) a convolution or
    linear layer with an affine-quantized kernel runs as its integer kernel would, exactly
    (``core.integer_accumulation``): integer products summed in float64, the bias rounded onto the
    accumulator's grid, one float32 rounding at the end. The float path is kept for ONNX export
    (where ONNX Runtime's integer kernels take over) and wherever the input grid is unknown.
    A model under training has no fixed input scale: ``set_input_holder`` names the activation
    holder upstream, whose current grid the integer path reads in eval mode (training runs the
    float path, which has gradients).
    """

    def __init__(self, module: nn.Module, weights_quantizers: Dict[str, nn.Module],
                 input_scale: Optional[float] = None):
        super().__init__()
        self.layer = module
        self.weights_quantizers = nn.ModuleDict(weights_quantizers)
        integer = input_scale is not None and _integer_kernel(module, self.weights_quantizers) is not None
        self.register_buffer("input_scale", torch.tensor(float(input_scale)) if integer else None)

    def set_input_holder(self, holder: Optional["PytorchActivationQuantizationHolder"]) -> None:
        # Kept out of the module tree (a reference, not a submodule): the holder belongs to the model.
        self.__dict__["_input_holder"] = holder

    def quantized_weights(self) -> Dict[str, torch.Tensor]:
        return {name: q(getattr(self.layer, name)) for name, q in self.weights_quantizers.items()}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and not torch.onnx.is_in_onnx_export():
            input_scale = self._integer_input_scale()
            kernel = _integer_kernel(self.layer, self.weights_quantizers) if input_scale is not None else None
            if kernel is not None:
                return self._integer_forward(args[0], input_scale, kernel)
        weights = self.quantized_weights()
        if torch.jit.is_tracing():  # the stateless API refuses tracing (TorchScript / ONNX export)
            return _call_with_tensors(self.layer, weights, args, kwargs)
        return torch.func.functional_call(self.layer, weights, args, kwargs, strict=False)

    def _integer_input_scale(self) -> Optional[torch.Tensor]:
        if self.input_scale is not None:
            return self.input_scale
        holder = self.__dict__.get("_input_holder")
        if holder is None or self.training:
            return None
        grid = holder.activation_holder_quantizer.grid()
        if not isinstance(grid, quant_math.AffineGrid) or grid.axis is not None:
            return None
        return torch.as_tensor(grid.scale).detach().float().reshape(())

    def _integer_forward(self, x: torch.Tensor, input_scale: torch.Tensor, kernel) -> torch.Tensor:
        wq = self.weights_quantizers["weight"]
        w_grid = wq.grid()
        w_int = self._integer_weights(wq, w_grid)
        x_int = torch.round(x.float() / input_scale)  # x = (q - zp) * s exactly: this is q - zp
        acc = _accumulate(kernel, x_int, w_int)
        w_scale = torch.as_tensor(w_grid.scale).detach().to(acc.device)
        scale = input_scale.float() * w_scale.float()
        shape = [-1] if isinstance(self.layer, nn.Linear) else [-1 if d == 1 else 1 for d in range(acc.dim())]
        bias = getattr(self.layer, "bias", None)
        if bias is not None:
            bias = bias.detach()
            if "bias" in self.weights_quantizers:
                bias = self.weights_quantizers["bias"](bias)
            on_grid = accumulator_bias(bias, input_scale, w_scale)
            if on_grid is None:  # beyond int32: integer kernels keep such a bias in float too
                return acc.float() * scale.reshape(shape) + bias.reshape(shape)
            b = on_grid[0].reshape(shape)
            # float32(acc + b) either way: a float32 sum of exact integers rounds once, like the
            # float64 sum then its float32 rounding (b itself exact in float32 below 2**24)
            acc = acc + b.float() if acc.dtype == torch.float32 and float(b.abs().max()) < _F32_EXACT \
                else acc.double() + b
        return acc.float() * scale.reshape(shape)

    def _integer_weights(self, wq: nn.Module, grid: quant_math.AffineGrid) -> torch.Tensor:
        """``q_w - zp_w`` (float32, exact), cached until the weights or the quantizer's state change."""
        w = self.layer.weight
        state = tuple((t.data_ptr(), t._version) for t in (*wq.parameters(), *wq.buffers()))
        key = (w.data_ptr(), w._version, w.device, state)
        cached = self.__dict__.get("_w_int_cache")
        if cached is None or cached[0] != key:
            with torch.no_grad():
                zero_point = torch.as_tensor(grid.zero_point).detach()
                w_int = quant_math.quantize(w.detach(), grid) - quant_math.per_channel_view(zero_point, w, grid.axis)
            cached = self.__dict__["_w_int_cache"] = (key, w_int)
        return cached[1]


_F32_EXACT = 2.0 ** 24  # integers up to here are exact in float32, whatever the order of the sums


def _accumulate(kernel, x_int: torch.Tensor, w_int: torch.Tensor) -> torch.Tensor:
    """The exact integer accumulator: float32 kernels where every partial sum stays below 2**24 (a
    bound from the largest |x| and |w| and the terms per output; the result float32, exact), else x
    split into its high and low 4 bits (two float32 passes), else float64 (those two give float64);
    always float64 on CUDA (TF32 would round)."""
    if x_int.is_cuda:
        return kernel(x_int.double(), w_int.double())
    terms, w_max = w_int[0].numel(), float(w_int.abs().max())
    x_max = float(x_int.abs().max()) if x_int.numel() else 0.0
    if terms * x_max * w_max < _F32_EXACT:
        return kernel(x_int, w_int)
    high = torch.floor(x_int / 16)
    low = x_int - 16 * high
    if terms * max(float(high.abs().max()), 15.0) * w_max < _F32_EXACT:
        return 16 * kernel(high, w_int).double() + kernel(low, w_int).double()
    return kernel(x_int.double(), w_int.double())


def _integer_kernel(layer: nn.Module, quantizers: nn.ModuleDict):
    """The layer's integer-kernel function (x_int, w_int) -> accumulator, or None if it has none."""
    wq = quantizers["weight"] if "weight" in quantizers else None
    grid = wq.grid() if wq is not None else None
    if not isinstance(grid, quant_math.AffineGrid) or grid.axis not in (None, 0):
        return None
    if type(layer) is nn.Linear:
        return lambda x, w: F.linear(x, w)
    convs = {nn.Conv1d: F.conv1d, nn.Conv2d: F.conv2d, nn.Conv3d: F.conv3d}
    if type(layer) in convs and layer.padding_mode == "zeros":
        conv = convs[type(layer)]
        return lambda x, w: conv(x, w, None, layer.stride, layer.padding, layer.dilation, layer.groups)
    return None


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
