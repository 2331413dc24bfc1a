"""The quantized model's building blocks, as mct-quantizers makes them.

The quantizers, the activation holder and the wrapper are subclasses of the MCT Quantizers
package's classes (``mct_quantizers``), so code written for MCT's quantized models reads them as it
would MCT's (``isinstance``, ``threshold_np`` / ``signed`` / ``num_bits`` / ``per_channel`` /
``min_range`` / ``max_range``, ``weights_quantizers`` a dict, the float weights as wrapper
parameters). What hwquant keeps of its own: the rounding and clipping of ``core.quant_math`` (one
source for the simulation, the integer kernels and the ONNX export), and the wrapper's exact
integer-kernel path.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from mct_quantizers import PytorchActivationQuantizationHolder as _MctqHolder
from mct_quantizers import PytorchQuantizationWrapper as _MctqWrapper
from mct_quantizers.pytorch import quantizers as mctq
from torch import nn

from hwquant.constants import LUT_VALUES, LUT_VALUES_BITWIDTH, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core.numerics import quant_math
from hwquant.core.numerics.integer_accumulation import accumulator_bias
from hwquant.tpc.enums import QuantizationMethod


class InferableQuantizer:
    """hwquant's side of every inferable quantizer (mixed into an mct-quantizers class): what it is
    (``method``, ``num_bits``, ``params`` in ``hwquant.constants`` keys, ``channel_axis``,
    ``target``), its integer ``grid`` (on any device) and the fake quantization onto it."""

    method: QuantizationMethod
    params: Dict[str, Any]
    channel_axis: Optional[int]
    target: str

    def _describe(self, method, num_bits: int, params: Dict[str, Any], channel_axis: Optional[int], target: str) -> None:
        self.method = QuantizationMethod(method)
        self.num_bits = int(num_bits)
        self.params = {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in params.items()}
        self.channel_axis = channel_axis
        self.target = target
        self.per_channel = channel_axis is not None
        self._numpy_grid = quant_math.make_grid(self.method, self.num_bits, params, axis=channel_axis)
        self._grids: Dict[torch.device, Any] = {}
        grid = self.grid()
        if isinstance(grid, quant_math.AffineGrid):  # the affine grid's figures (CPU tensors), for reading
            self.scale, self.zero_point = grid.scale, grid.zero_point

    def grid(self, device: Optional[torch.device] = None):
        """The integer grid; an affine one with torch tensors on ``device`` (default CPU)."""
        g = self._numpy_grid
        if isinstance(g, quant_math.LutGrid):
            return g
        device = torch.device(device or "cpu")
        if device not in self._grids:
            self._grids[device] = quant_math.AffineGrid(
                torch.as_tensor(np.asarray(g.scale, dtype=np.float32), device=device),
                torch.as_tensor(np.asarray(g.zero_point, dtype=np.float32), device=device), g.qmin, g.qmax, g.axis)
        return self._grids[device]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return quant_math.fake_quantize(x, self.grid(x.device))

    forward = __call__

    def to(self, *args, **kwargs) -> "InferableQuantizer":
        return self  # grids are made on the device of what they quantize

    def __getstate__(self):
        return {**self.__dict__, "_grids": {}}  # grids are made again on the devices of later calls

    def __repr__(self) -> str:
        what = {QuantizationMethod.UNIFORM: f"range=[{_fmt(self.params.get(RANGE_MIN))}, {_fmt(self.params.get(RANGE_MAX))}]",
                QuantizationMethod.LUT_POT_QUANTIZER: f"{len(self.params.get(LUT_VALUES, []))} values"}
        detail = what.get(self.method, f"threshold={_fmt(self.params.get(THRESHOLD))}")
        signed = "" if self.params.get(SIGNED) is None else (", signed" if self.params[SIGNED] else ", unsigned")
        axis = f", per-channel axis {self.channel_axis}" if self.per_channel else ""
        return f"{type(self).__name__}({self.method.name}, {self.num_bits} bits, {detail}{signed}{axis})"


def _flat(v: Any) -> list:
    return [float(t) for t in np.asarray(v, dtype=np.float64).reshape(-1)]


def _mixed(base: type) -> type:
    """``base`` (an mct-quantizers inferable quantizer) with hwquant's description and numerics."""
    name = base.__name__.replace("InferableQuantizer", "Quantizer")

    def __init__(self, method, num_bits, params, channel_axis, target, mctq_args: dict):
        base.__init__(self, **mctq_args)
        self._describe(method, num_bits, params, channel_axis, target)

    return type(name, (InferableQuantizer, base), {"__init__": __init__, "__module__": __name__,
                                                   "__doc__": f"{base.__name__} computing with hwquant's grid."})


# (target, method) -> the mct-quantizers class; the LUT-symmetric activation has none there.
_CLASSES = {
    ("activation", QuantizationMethod.POWER_OF_TWO): _mixed(mctq.ActivationPOTInferableQuantizer),
    ("activation", QuantizationMethod.SYMMETRIC): _mixed(mctq.ActivationSymmetricInferableQuantizer),
    ("activation", QuantizationMethod.UNIFORM): _mixed(mctq.ActivationUniformInferableQuantizer),
    ("activation", QuantizationMethod.LUT_POT_QUANTIZER): _mixed(mctq.ActivationLutPOTInferableQuantizer),
    ("weights", QuantizationMethod.POWER_OF_TWO): _mixed(mctq.WeightsPOTInferableQuantizer),
    ("weights", QuantizationMethod.SYMMETRIC): _mixed(mctq.WeightsSymmetricInferableQuantizer),
    ("weights", QuantizationMethod.UNIFORM): _mixed(mctq.WeightsUniformInferableQuantizer),
    ("weights", QuantizationMethod.LUT_POT_QUANTIZER): _mixed(mctq.WeightsLUTPOTInferableQuantizer),
    ("weights", QuantizationMethod.LUT_SYM_QUANTIZER): _mixed(mctq.WeightsLUTSymmetricInferableQuantizer),
}


def make_inferable_quantizer(method, num_bits: int, params: Dict[str, Any], channel_axis: Optional[int] = None,
                             target: str = "activation", input_rank: Optional[int] = None) -> InferableQuantizer:
    """The inferable quantizer of ``method`` for ``target`` ("activation" or "weights"): an
    mct-quantizers class with hwquant's numerics. ``input_rank``: rank of the weight (LUT kernels)."""
    method = QuantizationMethod(method)
    if target not in ("activation", "weights"):
        raise ValueError(f"target must be 'activation' or 'weights', got {target!r}")
    cls = _CLASSES.get((target, method))
    if cls is None:
        raise ValueError(f"no inferable {target} quantizer for {method.name}")
    per_channel = channel_axis is not None
    if method == QuantizationMethod.UNIFORM:
        args = {"min_range": _flat(params[RANGE_MIN]), "max_range": _flat(params[RANGE_MAX])}
    else:
        args = {"threshold": _flat(params[THRESHOLD])}
    if method.is_lut:
        args.update(lut_values=_flat(params[LUT_VALUES]),
                    lut_values_bitwidth=int(params.get("lut_values_bitwidth", LUT_VALUES_BITWIDTH)))
    if target == "activation":
        if method != QuantizationMethod.UNIFORM:
            args["signed"] = bool(params.get(SIGNED, True) is not False)
    else:
        args.update(per_channel=per_channel, channel_axis=channel_axis)
        if method.is_lut:
            args["input_rank"] = input_rank or (max(channel_axis, 0) + 1 if per_channel else None)
    return cls(method, num_bits, params, channel_axis, target, dict(num_bits=int(num_bits), **args))


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return f"[{len(v)} channels]" if len(v) > 4 else "[" + ", ".join(_fmt(x) for x in v) + "]"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class PytorchActivationQuantizationHolder(_MctqHolder):
    """Holds the activation quantizer applied to a layer's output (mct-quantizers' holder; a
    trainable quantizer, an nn.Module, is registered as its submodule)."""

    def extra_repr(self) -> str:
        q = self.activation_holder_quantizer
        return "" if isinstance(q, nn.Module) else repr(q)


class PytorchQuantizationWrapper(_MctqWrapper):
    """A layer whose weights pass through their quantizers on every call (mct-quantizers' wrapper:
    the float weights are the wrapper's parameters, ``weights_quantizers`` a dict, and each call
    writes the quantized weights into ``layer``).

    With ``input_scale`` (the scale of the per-tensor grid its input lies on) a convolution or
    linear layer with an affine-quantized kernel runs as its integer kernel would, exactly
    (``core.integer_accumulation``): integer products summed in float64, the bias rounded onto the
    accumulator's grid, one float32 rounding at the end. The float path is kept for ONNX export
    (where ONNX Runtime's integer kernels take over) and wherever the input grid is unknown.
    A model under training has no fixed input scale: ``set_input_holder`` names the activation
    holder upstream, whose current grid the integer path reads in eval mode (training runs the
    float path, which has gradients). Trainable weight quantizers (nn.Modules) are registered in
    ``trainable_quantizers`` so that their parameters train and move with the model.
    """

    def __init__(self, module: nn.Module, weights_quantizers: Dict[str, Any], input_scale: Optional[float] = None):
        grads = {name: getattr(module, name).requires_grad for name in weights_quantizers}
        super().__init__(module, dict(weights_quantizers))
        for name, g in grads.items():  # mct-quantizers makes every float weight trainable; keep the layer's flag
            getattr(self, name).requires_grad_(g)
        for k, q in self.weights_quantizers.items():
            if isinstance(q, nn.Module):
                self._trainable()[k] = q
        integer = input_scale is not None and _integer_kernel(module, self.weights_quantizers) is not None
        self.register_buffer("input_scale", torch.tensor(float(input_scale)) if integer else None)

    def float_weight(self, name: str) -> torch.Tensor:
        """The float (unquantized) weight ``name``."""
        return getattr(self, name) if name in self.weights_quantizers else getattr(self.layer, name)

    def set_weights_quantizer(self, name: str, quantizer: Any) -> None:
        """Replace the quantizer of weight ``name`` (the dict, the wrapper's weight variables and the
        registered trainable quantizers stay in step)."""
        self.weights_quantizers[name] = quantizer
        self._weights_vars = [(n, w, quantizer if n == name else q) for n, w, q in self._weights_vars]
        trainable = self._trainable()
        if name in trainable:
            del trainable[name]
        if isinstance(quantizer, nn.Module):
            trainable[name] = quantizer
        if not len(trainable):
            del self.trainable_quantizers

    def _trainable(self) -> nn.ModuleDict:
        """The registered trainable quantizers (made when first needed)."""
        if "trainable_quantizers" not in self._modules:
            self.trainable_quantizers = nn.ModuleDict()
        return self.trainable_quantizers

    def extra_repr(self) -> str:
        return ", ".join(f"{k}: {q!r}" for k, q in self.weights_quantizers.items() if not isinstance(q, nn.Module))

    def set_input_holder(self, holder: Optional["PytorchActivationQuantizationHolder"]) -> None:
        # Kept out of the module tree (a reference, not a submodule): the holder belongs to the model.
        self.__dict__["_input_holder"] = holder

    def quantized_weights(self) -> Dict[str, torch.Tensor]:
        return {name: q(getattr(self, name)) for name, q in self.weights_quantizers.items()}

    get_quantized_weights = quantized_weights

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and not _exporting_in_this_thread():
            input_scale = self._integer_input_scale(args[0])
            kernel = _integer_kernel(self.layer, self.weights_quantizers) if input_scale is not None else None
            if kernel is not None:
                return self._integer_forward(args[0], input_scale, kernel)
        quantized = self.quantized_weights()
        self.set_quantize_weights(quantized)
        out = self.layer(*args, **kwargs)
        if not torch.jit.is_tracing():
            # the layer keeps the quantized values to read (as mct-quantizers leaves them), not the
            # autograd graph: a non-leaf attribute would make the model impossible to deep-copy
            self.set_quantize_weights({k: v.detach() for k, v in quantized.items()})
        return out

    def _integer_input_scale(self, x: torch.Tensor) -> Optional[torch.Tensor]:
        if self.input_scale is not None:
            return self.input_scale
        holder = self.__dict__.get("_input_holder")
        if holder is None or self.training:
            return None
        grid = _grid_on(holder.activation_holder_quantizer, x.device)
        if not isinstance(grid, quant_math.AffineGrid) or grid.axis is not None:
            return None
        return torch.as_tensor(grid.scale).detach().float().reshape(()).to(x.device)

    def _integer_forward(self, x: torch.Tensor, input_scale: torch.Tensor, kernel) -> torch.Tensor:
        wq = self.weights_quantizers["weight"]
        w_grid = _grid_on(wq, x.device)
        w_int, w_quantized, w_sum = self._integer_weights(wq, w_grid)
        self.set_quantize_weights({"weight": w_quantized})  # what a call leaves in the layer, as on the float path
        inference = not torch.is_grad_enabled()  # then fresh intermediates are worked on in place
        # x = (q - zp) * s exactly: this is q - zp
        x_int = (x.float() / input_scale.to(x.device)).round_() if inference else \
            quant_math.integers_on_grid(x.float(), input_scale)
        acc = _accumulate(kernel, x_int, w_int, w_sum)
        w_scale = torch.as_tensor(w_grid.scale).detach().to(acc.device)
        scale = input_scale.float() * w_scale.float()
        shape = [-1] if isinstance(self.layer, nn.Linear) else [-1 if d == 1 else 1 for d in range(acc.dim())]
        bias = self.float_weight("bias")
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
            if acc.dtype == torch.float32 and float(b.abs().max()) < _F32_EXACT:
                acc = acc.add_(b.float()) if inference else acc + b.float()
            else:
                acc = acc.double() + b
        return acc.float().mul_(scale.reshape(shape)) if inference else acc.float() * scale.reshape(shape)

    def _integer_weights(self, wq: Any, grid: quant_math.AffineGrid) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """``q_w - zp_w`` (float32, exact), the fake-quantized kernel and the largest sum of one output's
        ``|q_w - zp_w|`` (`_accumulate`'s bound), cached until the weights or the quantizer's state change."""
        w = self.weight
        tensors = (*wq.parameters(), *wq.buffers()) if isinstance(wq, nn.Module) else ()
        key = (w.data_ptr(), w._version, w.device, tuple((t.data_ptr(), t._version) for t in tensors))
        cached = self.__dict__.get("_w_int_cache")
        # the quantizer itself, not its id(): the cache keeps it alive, so a quantizer swapped in later
        # (mixed-precision measurement) cannot reuse its id and the addresses of its buffers
        if cached is None or cached[0] is not wq or cached[1] != key:
            with torch.no_grad():
                zero_point = torch.as_tensor(grid.zero_point).detach().to(w.device)
                w_int = quant_math.quantize(w.detach(), grid) - quant_math.per_channel_view(zero_point, w, grid.axis)
                w_quantized = quant_math.fake_quantize(w.detach(), grid)
                w_sum = float(w_int.abs().flatten(1).sum(1).max()) if w_int.numel() else 0.0
            cached = self.__dict__["_w_int_cache"] = (wq, key, w_int, w_quantized, w_sum)
        return cached[2], cached[3], cached[4]


def _exporting_in_this_thread() -> bool:
    """An ONNX export is tracing this thread's call. torch.onnx's flag alone is process-wide: a model another
    thread runs meanwhile must keep its integer arithmetic; the tracer (TorchScript's, or torch.export's
    under the newer exporter) is what marks the exporting thread."""
    return torch.onnx.is_in_onnx_export() and (torch.jit.is_tracing() or torch.compiler.is_compiling())


def _grid_on(quantizer: Any, device: torch.device):
    """A quantizer's grid, on ``device`` for an inferable one (a trainable one's follows its parameters)."""
    return quantizer.grid(device) if isinstance(quantizer, InferableQuantizer) else quantizer.grid()


def quantizer_slots(model: nn.Module) -> Iterator[Tuple[str, nn.Module, Optional[str], Any]]:
    """(module path, holder or wrapper, weight name or None for a holder, quantizer) for every
    quantizer of ``model``."""
    for path, m in model.named_modules():
        if isinstance(m, PytorchActivationQuantizationHolder):
            yield path, m, None, m.activation_holder_quantizer
        elif isinstance(m, PytorchQuantizationWrapper):
            for name, q in list(m.weights_quantizers.items()):
                yield path, m, name, q


def set_quantizer(owner: nn.Module, name: Optional[str], quantizer: Any) -> None:
    """Put ``quantizer`` in a slot that ``quantizer_slots`` named."""
    if name is None:
        owner._modules.pop("activation_holder_quantizer", None)  # a trainable one was a submodule
        owner.__dict__.pop("activation_holder_quantizer", None)
        owner.activation_holder_quantizer = quantizer
    else:
        owner.set_weights_quantizer(name, quantizer)


_F32_EXACT = 2.0 ** 24  # integers up to here are exact in float32, whatever the order of the sums


def _accumulate(kernel, x_int: torch.Tensor, w_int: torch.Tensor, w_sum: float) -> torch.Tensor:
    """The exact integer accumulator: float32 kernels where every partial sum stays below 2**24, else x
    split into its high and low 4 bits (two float32 passes), else float64 (those two give float64);
    always float64 on CUDA (TF32 would round). The bound: any partial sum of an output, in any order, is
    at most max|x| times the sum of that output's |w| (far below terms x max|w| for real kernels, so most
    layers take the single float32 pass). `w_sum`: that largest sum of one output's |w|, worked out with w."""
    if x_int.is_cuda:
        return kernel(x_int.double(), w_int.double())
    x_max = max(abs(float(v)) for v in torch.aminmax(x_int)) if x_int.numel() else 0.0  # no |x| copy
    if x_max * w_sum < _F32_EXACT:
        return kernel(x_int, w_int)
    high = torch.floor(x_int / 16)
    low = x_int - 16 * high
    if max(float(high.abs().max()), 15.0) * w_sum < _F32_EXACT:
        return 16 * kernel(high, w_int).double() + kernel(low, w_int).double()
    return kernel(x_int.double(), w_int.double())


def _integer_kernel(layer: nn.Module, quantizers: Dict[str, Any]):
    """The layer's integer-kernel function (x_int, w_int) -> accumulator, or None if it has none."""
    wq = quantizers.get("weight")
    grid = wq.grid() if wq is not None and hasattr(wq, "grid") else None
    if not isinstance(grid, quant_math.AffineGrid) or grid.axis not in (None, 0):
        return None
    if type(layer) is nn.Linear:
        return lambda x, w: F.linear(x, w)
    convs = {nn.Conv1d: F.conv1d, nn.Conv2d: F.conv2d, nn.Conv3d: F.conv3d}
    if type(layer) in convs and layer.padding_mode == "zeros":
        conv = convs[type(layer)]
        return lambda x, w: conv(x, w, None, layer.stride, layer.padding, layer.dilation, layer.groups)
    return None
