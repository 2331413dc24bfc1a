"""The single home of quantization arithmetic: every quantizer, threshold search and exporter
rounds and clips through this module, so that simulation and the exported integer grid agree.

A quantizer is described by a grid: an :class:`AffineGrid` (power-of-two, symmetric and uniform
quantizers all reduce to ``q = clip(round(x / scale) + zero_point, qmin, qmax)``) or a
:class:`LutGrid` (non-uniform lookup table). Grids keep their parameters as python floats or numpy
arrays (a trainable quantizer may put its framework's tensors there). The functions applying them take
any registered array type and return the input's type, device and dtype: numpy is built in; each
framework registers an :class:`ArrayNamespace` when its package loads (hwquant/torch/array_namespace.py,
hwquant/keras/array_namespace.py), so this module never imports a framework and ``hwquant.core`` stays
importable without one. Rounding is half-to-even (as ONNX QuantizeLinear) in every namespace.

The straight-through / LSQ gradients of fake quantization are written here too
(:func:`affine_fake_quantize_gradients`); a framework only wraps them in its autograd mechanism.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, List, Optional, Tuple, Union

import numpy as np

from hwquant.constants import (LUT_VALUES, LUT_VALUES_BITWIDTH, MAX_N_BITS, MIN_N_BITS, MIN_THRESHOLD, RANGE_MAX,
                               RANGE_MIN, SIGNED, THRESHOLD)

# Params-dict key of the LUT values bit width (constants.LUT_VALUES_BITWIDTH is its default).
LUT_VALUES_BITWIDTH_KEY = "lut_values_bitwidth"


# ----------------------------------------------------------------------------- array namespaces
class ArrayNamespace:
    """The operations this module applies, for one array library (this base class: numpy)."""
    ops: Any = np  # the library's own functions named round, floor, clip, where, zeros_like, reshape
    module: Any = np  # the lookup-table search's library (numpy and torch only)

    def owns(self, x) -> bool:
        return isinstance(x, (np.ndarray, np.generic))

    def to_numpy(self, v) -> np.ndarray:
        return np.asarray(v)

    def prepare(self, x):
        """(x as a float of >= 32 bits, the dtype to return)."""
        x = np.asarray(x)
        x = x if x.dtype.kind == "f" else x.astype(np.float64)
        return (x.astype(np.float32) if x.dtype.itemsize < 4 else x), x.dtype

    def cast(self, y, dtype):
        return np.asarray(y).astype(dtype, copy=False)

    def param(self, value, like):
        """A grid parameter in ``like``'s library, device and dtype (a parameter of the library's own
        type keeps its gradient)."""
        return _to_numpy(value).astype(like.dtype, copy=False)

    def astype(self, x, dtype: str):
        """``x`` as the float type named ``dtype`` ("float32", "float64")."""
        return np.asarray(x).astype(dtype)

    def broadcast_to(self, x, shape):
        return np.broadcast_to(x, shape).copy()

    def reshape(self, p, shape):
        return self.ops.reshape(p, shape)

    def dequantized_in_place(self, units, zero_point, qmin: float, qmax: float, scale):
        """``(clip(round(units) + zero_point, qmin, qmax) - zero_point) * scale`` computed in ``units``' own
        memory (a fresh array the caller owns; zero_point None for 0), or None where the library cannot
        or should not (autograd needs the intermediates): the caller then takes the step-by-step path,
        which gives the same values."""
        return None

    def round(self, x):
        return self.ops.round(x)

    def floor(self, x):
        return self.ops.floor(x)

    def clip(self, x, lo, hi):
        return self.ops.clip(x, lo, hi)

    def where(self, condition, a, b):
        return self.ops.where(condition, a, b)

    def zeros_like(self, x):
        return self.ops.zeros_like(x)

    def stop_gradient(self, x):
        """``x`` as a value the backward pass does not go through (numpy has no gradients)."""
        return x

    def sum_to(self, t, like, axis: Optional[int]):
        """A gradient of x's shape summed down to a per-tensor / per-channel parameter's shape."""
        like = np.asarray(like)
        if like.size == 1 or axis is None:
            return np.asarray(t.sum()).reshape(like.shape)
        return t.sum(axis=tuple(d for d in range(t.ndim) if d != axis % t.ndim)).reshape(like.shape)

    def power_of_two_ceil(self, t, min_threshold: float):
        """``2**ceil(log2(max(t, min_threshold)))`` of a tensor threshold, exactly."""
        raise NotImplementedError


_NUMPY = ArrayNamespace()
_REGISTERED: List[ArrayNamespace] = []
# where an array type that no registered namespace owns comes from -> the package that registers it
_REGISTERING_PACKAGE = {"torch": "hwquant.torch", "keras": "hwquant.keras", "tensorflow": "hwquant.keras",
                        "jax": "hwquant.keras", "jaxlib": "hwquant.keras"}


def register_namespace(namespace: ArrayNamespace, first: bool = False) -> None:
    """Make this module apply grids to ``namespace``'s arrays (a framework package calls it once).
    ``first``: asked before the others, whatever the import order (torch's: Keras' namespace also owns
    the torch tensors of Keras' torch backend, but has no lookup-table search)."""
    if not any(type(n) is type(namespace) for n in _REGISTERED):
        _REGISTERED.insert(0, namespace) if first else _REGISTERED.append(namespace)


def namespace_of(x) -> ArrayNamespace:
    """The namespace of ``x``: the first registered one that owns it, else numpy (python numbers and
    sequences too); an array of a framework whose package has not registered is an error."""
    for namespace in _REGISTERED:
        if namespace.owns(x):
            return namespace
    library = type(x).__module__.split(".")[0]
    if library in _REGISTERING_PACKAGE:
        raise TypeError(f"quant_math was given a {type(x).__name__} ({library}) but no namespace for it is "
                        f"registered: import {_REGISTERING_PACKAGE[library]} first")
    return _NUMPY


def _to_numpy(v) -> np.ndarray:
    """Parameters to numpy, so grids are backend-neutral (a tensor is detached and copied)."""
    return namespace_of(v).to_numpy(v)


def _prepare(x):
    """(namespace, x as a float of >= 32 bits, dtype to return): half types are computed in float32 so
    that every integer up to 2**16 stays exact; non-float inputs become the default float."""
    namespace = namespace_of(x)
    x, dtype = namespace.prepare(x)
    return namespace, x, dtype


def per_channel_view(param, x, axis: Optional[int] = None):
    """``param`` in ``x``'s library/device/dtype, shaped to broadcast against ``x`` along ``axis``:
    a scalar stays 0-d, a 1-D array of length C (or 1) becomes shape ``[1, .., C, .., 1]``.
    A parameter of x's own library keeps its gradient."""
    namespace = namespace_of(x)
    p = namespace.param(param, x)
    if axis is None or len(p.shape) == 0:
        return p
    nd = len(x.shape)
    if not -nd <= axis < nd:
        raise ValueError(f"axis must be in [{-nd}, {nd - 1}] for an input of {nd} dims, got {axis}")
    if len(p.shape) != 1 or p.shape[0] not in (1, x.shape[axis]):
        raise ValueError(f"per-channel parameter of shape {tuple(p.shape)} does not match the "
                         f"{x.shape[axis]} channels of x along axis {axis}")
    return namespace.reshape(p, [-1 if d == axis % nd else 1 for d in range(nd)])


# ----------------------------------------------------------------------------- validation
def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _check_bits(n_bits, name: str = "n_bits") -> int:
    if not (_is_int(n_bits) and MIN_N_BITS <= n_bits <= MAX_N_BITS):
        raise ValueError(f"{name} must be an int in [{MIN_N_BITS}, {MAX_N_BITS}], got {n_bits!r}")
    return int(n_bits)


def _check_axis_signed(axis, signed=True):
    if not (axis is None or _is_int(axis)):
        raise ValueError(f"axis must be None (per-tensor) or an int, got {axis!r}")
    if not (isinstance(signed, (bool, np.bool_)) or signed in (0, 1)):
        raise ValueError(f"signed must be a bool, got {signed!r}")
    return (None if axis is None else int(axis)), bool(signed)


def _int_range(n_bits: int, signed: bool) -> Tuple[int, int]:
    return (-2 ** (n_bits - 1), 2 ** (n_bits - 1) - 1) if signed else (0, 2 ** n_bits - 1)


def _check_param(value, name: str, axis, positive: bool = False):
    """A python float (axis None) or a 1-D float64 array (per-channel), finite (and > 0)."""
    try:
        a = np.array(_to_numpy(value), dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    if axis is None and a.size != 1:
        raise ValueError(f"{name} must be a scalar for a per-tensor grid (axis=None), got shape {a.shape}")
    if a.ndim > 1 or a.size == 0:
        raise ValueError(f"{name} must be a scalar or a non-empty 1-D per-channel array, got shape {a.shape}")
    bad = ~np.isfinite(a) | (a <= 0 if positive else False)
    if bad.any():
        where = f" at channels {np.flatnonzero(bad)[:8].tolist()}" if a.ndim else ""
        raise ValueError(f"{name} must be finite{' and > 0' if positive else ''}, "
                         f"got {a[bad][:8].tolist() if a.ndim else a.item()!r}{where}")
    return float(a.reshape(())) if axis is None else np.atleast_1d(a)


def _check_range(range_min, range_max, axis) -> Tuple[Any, Any]:
    lo, hi = _check_param(range_min, "range_min", axis), _check_param(range_max, "range_max", axis)
    if axis is not None:
        lo, hi = (np.array(v) for v in np.broadcast_arrays(lo, hi))
    bad = np.atleast_1d(lo > hi)
    if bad.any():
        lo_bad, hi_bad = (np.atleast_1d(v)[bad][:8].tolist() for v in (lo, hi))
        raise ValueError(f"range_min must be <= range_max, got range_min={lo_bad} > range_max={hi_bad}")
    return lo, hi


def _float_or_array(v, per_channel: bool):
    return np.asarray(v, dtype=np.float64) if per_channel else float(v)


class _ArrayFields:
    """Value equality and hashing for frozen dataclasses whose fields may hold arrays."""

    def _key(self):
        values = (getattr(self, f.name) for f in fields(self))
        return tuple(v if v is None or isinstance(v, (int, float, str)) else
                     (np.shape(a := _to_numpy(v)), tuple(np.ravel(a).tolist())) for v in values)

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


# ----------------------------------------------------------------------------- affine grids
@dataclass(frozen=True, eq=False)
class AffineGrid(_ArrayFields):
    """The integer grid of every uniform quantizer: real = (q - zero_point) * scale, q in [qmin, qmax].

    ``scale`` / ``zero_point`` are python floats (per-tensor) or 1-D arrays along ``axis`` of the
    input (per-channel). The builders give numpy; a trainable quantizer may put torch tensors here
    directly, and gradients then flow to them.
    """
    scale: Any
    zero_point: Any
    qmin: int
    qmax: int
    axis: Optional[int] = None

    def __post_init__(self):
        if not (_is_int(self.qmin) and _is_int(self.qmax) and self.qmin < self.qmax):
            raise ValueError(f"qmin < qmax must be ints, got qmin={self.qmin!r}, qmax={self.qmax!r}")
        if self.axis is None and any(np.prod(np.shape(v)) != 1 for v in (self.scale, self.zero_point)):
            raise ValueError("a per-tensor grid (axis=None) needs a scalar scale and zero_point")


def power_of_two_threshold(threshold, min_threshold: float = MIN_THRESHOLD):
    """The threshold rounded UP to a power of two, ``2**ceil(log2(max(t, min_threshold)))``, taken
    exactly from the binary exponent (frexp): a float log2 misses values a hair above 2**k."""
    if not (np.isfinite(min_threshold) and min_threshold > 0):
        raise ValueError(f"min_threshold must be finite and > 0, got {min_threshold!r}")
    namespace = namespace_of(threshold)
    if namespace is not _NUMPY:
        return namespace.power_of_two_ceil(threshold, min_threshold)
    a = _check_param(threshold, "threshold", None if np.ndim(threshold) == 0 else 0, positive=True)
    m, e = np.frexp(np.maximum(a, min_threshold))
    r = np.ldexp(1.0, e - (m == 0.5))
    return float(r) if np.ndim(threshold) == 0 else r


def symmetric_grid(threshold, n_bits: int, signed: bool = True, axis: Optional[int] = None) -> AffineGrid:
    """Symmetric grid: scale = t / 2**(n-1) (signed) or t / 2**n (unsigned), zero point 0; the
    integers are [-2**(n-1), 2**(n-1)-1] or [0, 2**n-1], so the largest value is ``t - scale``."""
    n, (axis, signed) = _check_bits(n_bits), _check_axis_signed(axis, signed)
    scale = _check_param(threshold, "threshold", axis, positive=True) / 2.0 ** (n - 1 if signed else n)
    return AffineGrid(scale, 0.0 if axis is None else np.zeros_like(scale), *_int_range(n, signed), axis)


def power_of_two_grid(threshold, n_bits: int, signed: bool = True, axis: Optional[int] = None,
                      min_threshold: float = MIN_THRESHOLD) -> AffineGrid:
    """Symmetric grid on the threshold rounded up to a power of two (scaling is a bit shift)."""
    t = _check_param(threshold, "threshold", _check_axis_signed(axis)[0], positive=True)
    return symmetric_grid(power_of_two_threshold(t, min_threshold), n_bits, signed, axis)


def _uniform_params(lo, hi, n: int):
    """(scale, zero_point, range_min', range_max') of the zero-including, zero-on-grid range."""
    levels = 2 ** n - 1
    lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    narrow = (hi - lo) < MIN_THRESHOLD  # e.g. [0, 0]: widened to MIN_THRESHOLD, so the scale never underflows
    scale = np.maximum(hi - lo, MIN_THRESHOLD) / levels
    zp = np.clip(np.round(-lo / scale), 0, levels) + 0.0  # "+ 0.0" turns -0.0 into 0.0
    nudge = ((lo < 0) & (hi > 0)) | narrow
    new_lo = np.where(nudge, -zp * scale, lo) + 0.0
    return scale, zp, new_lo, np.where(nudge, new_lo + scale * levels, hi)


def fix_range_to_include_zero(range_min, range_max, n_bits: int) -> Tuple[Any, Any]:
    """Make [range_min, range_max] contain zero and, if it straddles zero, shift it (keeping its
    width) so that zero is exactly a grid point: zero must be exact for padding and ReLU.
    A range narrower than MIN_THRESHOLD is widened to MIN_THRESHOLD (zero stays on the grid).
    Scalars give floats, arrays give float64 arrays."""
    n = _check_bits(n_bits)
    per_channel = np.ndim(_to_numpy(range_min)) > 0 or np.ndim(_to_numpy(range_max)) > 0
    _, _, lo, hi = _uniform_params(*_check_range(range_min, range_max, 0 if per_channel else None), n)
    return _float_or_array(lo, per_channel), _float_or_array(hi, per_channel)


def uniform_grid(range_min, range_max, n_bits: int, axis: Optional[int] = None) -> AffineGrid:
    """Affine grid over the fixed range: scale = (rmax - rmin) / (2**n - 1), integers [0, 2**n-1]."""
    n, (axis, _) = _check_bits(n_bits), _check_axis_signed(axis)
    scale, zp, _, _ = _uniform_params(*_check_range(range_min, range_max, axis), n)
    pc = axis is not None
    return AffineGrid(_float_or_array(scale, pc), _float_or_array(zp, pc), 0, 2 ** n - 1, axis)


def _affine_params(grid: AffineGrid, x):
    if not isinstance(grid, AffineGrid):
        raise TypeError(f"expected an AffineGrid, got {type(grid).__name__}")
    return per_channel_view(grid.scale, x, grid.axis), per_channel_view(grid.zero_point, x, grid.axis)


def grid_units(x, grid: AffineGrid):
    """``x / scale``: x in steps of the grid, before rounding (GPTQ learns how to round it), in x's
    float dtype (float32 for half inputs)."""
    _, x, _ = _prepare(x)
    scale, _ = _affine_params(grid, x)
    return x / scale


def _zero_point_is_zero(grid: AffineGrid) -> bool:
    zp = grid.zero_point
    return isinstance(zp, (int, float, np.ndarray, np.generic)) and not np.any(zp)


def unclipped_integers(x, grid: AffineGrid):
    """``round(x / scale) + zero_point`` before clipping (trainable quantizers read which values
    fall outside [qmin, qmax] from it), in x's float dtype (float32 for half inputs)."""
    namespace = namespace_of(x)
    units = namespace.round(grid_units(x, grid))
    return units if _zero_point_is_zero(grid) else units + _affine_params(grid, units)[1]


def quantize(x, grid: AffineGrid):
    """Integers ``clip(round(x / scale) + zero_point, qmin, qmax)`` in x's float dtype (float32 for
    half inputs, so every integer up to 2**16 is exact)."""
    return namespace_of(x).clip(unclipped_integers(x, grid), grid.qmin, grid.qmax)


def dequantize(q, grid: AffineGrid):
    """Real values ``(q - zero_point) * scale``."""
    namespace, q, out = _prepare(q)
    scale, zp = _affine_params(grid, q)
    return namespace.cast(q * scale if _zero_point_is_zero(grid) else (q - zp) * scale, out)


def fake_quantize(x, grid: Union[AffineGrid, "LutGrid"]):
    """``dequantize(quantize(x))`` in x's dtype. Idempotent: fl(k * scale) / scale rounds back to k
    for every |k| <= 2**16. A LutGrid is handed to :func:`lut_fake_quantize`."""
    if isinstance(grid, LutGrid):
        return lut_fake_quantize(x, grid)
    namespace, x, out = _prepare(x)
    scale, zero_point = _affine_params(grid, x)
    # the same operations in one buffer where the library allows it (inference: big activations are
    # then not allocated five times over)
    fused = namespace.dequantized_in_place(x / scale, None if _zero_point_is_zero(grid) else zero_point,
                                           grid.qmin, grid.qmax, scale)
    return namespace.cast(dequantize(quantize(x, grid), grid) if fused is None else fused, out)


def fake_quantize_with_bounds(x, scale, zero_point, qmin, qmax):
    """Per-tensor fake quantization whose integer bounds may themselves be tensors (a grid chosen at run
    time: the mixed-precision measurement swaps candidates of different widths into one layer)."""
    namespace, x, out = _prepare(x)
    scale, zero_point = namespace.param(scale, x), namespace.param(zero_point, x)
    q = namespace.clip(namespace.round(x / scale) + zero_point, qmin, qmax)
    return namespace.cast((q - zero_point) * scale, out)


def round_to_integers(x):
    """Half-to-even rounding in x's library (a learned zero point onto the integers)."""
    return namespace_of(x).round(x)


def rounding_remainders(x, grid: AffineGrid):
    """Where each value lies between its two grid neighbours: the fractional part of ``x / scale``, x
    clipped to the grid's range first (GPTQ's soft rounding starts from it)."""
    namespace = namespace_of(x)
    _, zp = _affine_params(grid, x)
    units = namespace.clip(grid_units(x, grid), grid.qmin - zp, grid.qmax - zp)
    return units - namespace.floor(units)


def soft_rounded(x, grid: AffineGrid, up, hard: bool = False):
    """``dequantize(clip(floor(x / scale) + up + zero_point, qmin, qmax))``: x rounded down, plus ``up``
    (in [0, 1]: AdaRound's learned h(v); ``hard``: up rounded to 0 or 1, the values on the grid)."""
    namespace = namespace_of(x)
    _, zp = _affine_params(grid, x)
    if hard:
        up = namespace.where(up >= 0.5, 1.0, 0.0)
    q = namespace.clip(namespace.floor(grid_units(x, grid)) + up + zp, grid.qmin, grid.qmax)
    return dequantize(q, grid)


def stop_gradient(x):
    """``x`` without its gradient, in x's library."""
    return namespace_of(x).stop_gradient(x)


def straight_through(value, forward_value):
    """``forward_value`` in the forward pass, the gradient of ``value`` in the backward pass."""
    return value + stop_gradient(forward_value - value)


def clip_below(x, lowest: float):
    """``max(x, lowest)``, with x's gradient where it is not clipped (a learned threshold's floor)."""
    return namespace_of(x).clip(x, lowest, float("inf"))


def integers_on_grid(x, scale):
    """``round(x / scale)``: the integers of values that lie on a grid of step ``scale`` (exact for them),
    or of a bias brought onto an accumulator's grid."""
    namespace = namespace_of(x)
    return namespace.round(x / namespace.param(scale, x))


def affine_fake_quantize_forward(x, grid: AffineGrid):
    """(fake-quantized x, mask of the elements inside [qmin, qmax]): the forward pass of a trainable
    quantizer, with what its backward pass needs."""
    namespace = namespace_of(x)
    r = unclipped_integers(x, grid)
    q = namespace.clip(r, grid.qmin, grid.qmax)
    return dequantize(q, grid), q == r


def affine_fake_quantize_gradients(g, x, y, inside, scale, zero_point, axis: Optional[int], learn_rounding: bool,
                                   scale_grad_factor: float, want_scale: bool, want_zero_point: bool):
    """The backward pass of ``y = (clip(round(x / s) + z, qmin, qmax) - z) * s``, with ``r = round(x / s) + z``:

        dy/dx = 1 where qmin <= r <= qmax, else 0                      (straight-through rounding)
        dy/ds = round(x / s) - x / s inside (LSQ) or 0 inside (STE);  qmin - z below;  qmax - z above
        dy/dz = 0 inside;  -s outside

    written with ``y = (q - z) s`` so that every term is a sum over x's elements:
    ``dL/ds = sum(g (y - inside x)) / s`` (LSQ), ``sum(g outside y) / s`` (STE); ``dL/dz = -s sum(g outside)``.
    The scale's gradient is multiplied by ``scale_grad_factor`` (LSQ's 1 / sqrt(N * Q_max)). ``scale`` and
    ``zero_point`` are the parameters as learned (their shapes are the gradients'), without gradient.
    Returns (dL/dx, dL/ds or None, dL/dz or None)."""
    namespace = namespace_of(g)
    gx = namespace.where(inside, g, namespace.zeros_like(g))
    gs = gz = None
    if want_scale:
        moved = g * y - gx * x if learn_rounding else (g - gx) * y
        gs = namespace.sum_to(moved, scale, axis) / scale * scale_grad_factor
    if want_zero_point:
        gz = -scale * namespace.sum_to(g - gx, zero_point, axis)
    return gx, gs, gz


def grid_values(grid: AffineGrid, dtype=np.float64) -> np.ndarray:
    """All representable values, ascending: shape (levels,), or (C, levels) per-channel. With
    ``dtype=np.float32`` they are bitwise what float32 fake-quantization produces."""
    q = np.arange(grid.qmin, grid.qmax + 1, dtype=dtype)
    scale, zp = (np.asarray(_to_numpy(v), dtype=dtype) for v in (grid.scale, grid.zero_point))
    shape = () if grid.axis is None else (-1, 1)
    return (q - zp.reshape(shape)) * scale.reshape(shape)


def grid_range(grid: AffineGrid) -> Tuple[Any, Any]:
    """(smallest, largest) representable value: floats, or 1-D arrays per-channel."""
    scale, zp = (np.asarray(_to_numpy(v), dtype=np.float64) for v in (grid.scale, grid.zero_point))
    pc = grid.axis is not None
    return _float_or_array((grid.qmin - zp) * scale, pc), _float_or_array((grid.qmax - zp) * scale, pc)


# ----------------------------------------------------------------------------- lookup-table grids
@dataclass(frozen=True, eq=False)
class LutGrid(_ArrayFields):
    """Non-uniform grid: x is scaled by ``threshold`` to the ``lut_values_bitwidth``-bit integer
    range and snapped to the nearest table entry; its "integer" is the index into the table."""
    lut_values: np.ndarray
    threshold: Any
    lut_values_bitwidth: int = LUT_VALUES_BITWIDTH
    signed: bool = True
    axis: Optional[int] = None

    @property
    def multiplier(self) -> float:
        """2**(b-1) (signed) or 2**b (unsigned): table integers per threshold."""
        return 2.0 ** (self.lut_values_bitwidth - 1 if self.signed else self.lut_values_bitwidth)

    @property
    def int_range(self) -> Tuple[int, int]:
        return _int_range(self.lut_values_bitwidth, self.signed)


def lut_grid(lut_values, threshold, lut_values_bitwidth: int = LUT_VALUES_BITWIDTH, signed: bool = True,
             axis: Optional[int] = None, power_of_two: bool = False) -> LutGrid:
    """Validate a table (integers inside the b-bit range, signed or unsigned like the grid) and its
    threshold; ``power_of_two`` rounds the threshold up to a power of two (LUT_POT_QUANTIZER)."""
    b = _check_bits(lut_values_bitwidth, "lut_values_bitwidth")
    axis, signed = _check_axis_signed(axis, signed)
    t = _check_param(threshold, "threshold", axis, positive=True)
    lut, (lo, hi) = np.asarray(_to_numpy(lut_values), dtype=np.float64).ravel(), _int_range(b, signed)
    if lut.size == 0 or not np.isfinite(lut).all() or (lut != np.round(lut)).any() \
            or lut.min() < lo or lut.max() > hi:
        raise ValueError(f"lut_values must be a non-empty set of integers in [{lo}, {hi}] "
                         f"({'signed' if signed else 'unsigned'} {b} bits), got {lut[:16].tolist()}")
    return LutGrid(lut.astype(np.int64), power_of_two_threshold(t) if power_of_two else t, b, signed, axis)


def lut_quantize(x, grid: LutGrid):
    """Index (int64) of the table entry nearest to ``clip(x / t * multiplier)``, the smaller index on
    a tie (exactly ``argmin |xs - lut|``), by a sorted search rather than an (N, K) distance table."""
    namespace, x, _ = _prepare(x)
    xp = namespace.module
    lo, hi = grid.int_range
    xs = xp.clip(x / per_channel_view(grid.threshold, x, grid.axis) * grid.multiplier, lo, hi)
    values, first = np.unique(grid.lut_values, return_index=True)  # sorted distinct values, first index
    if values.size == 1:  # a one-entry table: every index is 0
        return np.zeros(xs.shape, np.int64) if xp is np else xp.zeros_like(xs, dtype=xp.int64)
    first, sv = (first if xp is np else xp.as_tensor(first, device=x.device)), per_channel_view(values, x)
    pos = xp.clip(xp.searchsorted(sv, xs if xp is np else xs.contiguous()), 1, values.size - 1)
    d_left, d_right = xp.abs(xs - sv[pos - 1]), xp.abs(sv[pos] - xs)
    i_left, i_right = first[pos - 1], first[pos]
    return xp.where((d_right < d_left) | ((d_right == d_left) & (i_right < i_left)), i_right, i_left)


def lut_dequantize(idx, grid: LutGrid, dtype=None):
    """``lut_values[idx] * t / multiplier``, as float64 (numpy) / torch's default dtype or ``dtype``."""
    namespace = namespace_of(idx)
    if namespace is not _NUMPY:
        torch = namespace.module
        dtype = torch.get_default_dtype() if dtype is None else dtype
        chosen = torch.as_tensor(grid.lut_values, device=idx.device)[idx].to(dtype)
    else:
        chosen = grid.lut_values[np.asarray(idx)].astype(np.float64 if dtype is None else dtype)
    return chosen * per_channel_view(grid.threshold, chosen, grid.axis) / grid.multiplier


def lut_fake_quantize(x, grid: LutGrid):
    """``lut_dequantize(lut_quantize(x))`` in x's dtype; idempotent (entries are distinct integers)."""
    namespace, xc, out = _prepare(x)
    return namespace.cast(lut_dequantize(lut_quantize(xc, grid), grid, dtype=xc.dtype), out)


# ----------------------------------------------------------------------------- dispatch
def make_grid(method, n_bits: int, params: dict, axis: Optional[int] = None) -> Union[AffineGrid, LutGrid]:
    """The grid of ``method`` from a quantization-params dict (keys from ``hwquant.constants``).
    ``is_signed`` defaults to True when missing or None; LUT grids read the table bit width from
    ``params['lut_values_bitwidth']`` (default 8) and allow at most 2**n_bits table entries."""
    from hwquant.tpc.enums import QuantizationMethod  # lazy: importing core must not load the TPC package
    try:
        method = QuantizationMethod(method)
    except ValueError:
        names = [m.name for m in QuantizationMethod]
        raise ValueError(f"method must be one of {names}, got {method!r}") from None
    n = _check_bits(n_bits)

    def get(key):
        if key not in params:
            raise ValueError(f"params for {method.name} need key {key!r}, got keys {sorted(params)}")
        return params[key]

    signed = True if params.get(SIGNED) is None else params[SIGNED]
    if method == QuantizationMethod.POWER_OF_TWO:
        return power_of_two_grid(get(THRESHOLD), n, signed, axis)
    if method == QuantizationMethod.SYMMETRIC:
        return symmetric_grid(get(THRESHOLD), n, signed, axis)
    if method == QuantizationMethod.UNIFORM:
        return uniform_grid(get(RANGE_MIN), get(RANGE_MAX), n, axis)
    size = np.size(_to_numpy(get(LUT_VALUES)))
    if size > 2 ** n:
        raise ValueError(f"lut_values may hold at most 2**n_bits = {2 ** n} entries, got {size}")
    bits = params.get(LUT_VALUES_BITWIDTH_KEY, LUT_VALUES_BITWIDTH)
    return lut_grid(params[LUT_VALUES], get(THRESHOLD), bits, signed, axis, method.is_power_of_two)


def fake_quantize_with(method, n_bits: int, params: dict, x, axis: Optional[int] = None):
    """Convenience: :func:`make_grid`, then the matching fake-quantizer."""
    return fake_quantize(x, make_grid(method, n_bits, params, axis))
