"""Property and unit tests of hwquant.core.numerics.quant_math, the one module that rounds and clips."""
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hwquant.constants import LUT_VALUES, MIN_THRESHOLD, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core.numerics import quant_math as qm

SETTINGS = settings(max_examples=60, deadline=None)
EPS32 = float(np.finfo(np.float32).eps)
KINDS = ["power_of_two", "symmetric_signed", "symmetric_unsigned", "uniform"]
BACKENDS = ["numpy", "torch"]

positive = st.floats(2.0 ** -12, 2.0 ** 12)
endpoint = st.one_of(st.just(0.0), st.floats(1e-3, 1e3), st.floats(-1e3, -1e-3))


def apply(fn, x, backend, *args, **kwargs):
    """Run ``fn`` on numpy float32 ``x`` in the given backend; check the result type; return numpy."""
    if backend == "numpy":
        out = fn(x, *args, **kwargs)
        assert isinstance(out, (np.ndarray, np.generic))
        return np.asarray(out)
    out = fn(torch.from_numpy(x), *args, **kwargs)
    assert isinstance(out, torch.Tensor)
    return out.numpy()


def channel_view(p, ndim, axis):
    """A per-channel numpy parameter shaped to broadcast along ``axis`` (scalars unchanged)."""
    return p if axis is None else np.asarray(p).reshape([-1 if d == axis % ndim else 1 for d in range(ndim)])


def channel_rows(a, axis):
    """``a`` as (C, -1): one row per channel (a single row per-tensor)."""
    return a.reshape(1, -1) if axis is None else np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)


def qm_method(name):
    """QuantizationMethod by name (imported late: the core module itself does not need it)."""
    from hwquant.tpc.enums import QuantizationMethod
    return QuantizationMethod[name]


@st.composite
def shapes_and_axes(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    axis = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))
    return shape, axis, 1 if axis is None else shape[axis]


def per_channel(values, axis):
    return float(values[0]) if axis is None else np.asarray(values, dtype=np.float64)


@st.composite
def affine_cases(draw, kinds=tuple(KINDS)):
    """(kind, grid, x): a grid of every kind, per-tensor or per-channel, and float32 data around it."""
    kind, n_bits = draw(st.sampled_from(kinds)), draw(st.integers(2, 16))
    shape, axis, c = draw(shapes_and_axes())
    if kind == "uniform":
        pairs = [sorted(draw(st.tuples(endpoint, endpoint))) for _ in range(c)]
        lo, hi = per_channel([p[0] for p in pairs], axis), per_channel([p[1] for p in pairs], axis)
        grid = qm.uniform_grid(lo, hi, n_bits, axis=axis)
        magnitude = np.maximum(np.maximum(np.abs(lo), np.abs(hi)), 1e-3)
    else:
        t = per_channel(draw(st.lists(positive, min_size=c, max_size=c)), axis)
        builder = qm.power_of_two_grid if kind == "power_of_two" else qm.symmetric_grid
        grid = builder(t, n_bits, signed=kind != "symmetric_unsigned", axis=axis)
        magnitude = np.asarray(t)
    unit = draw(hnp.arrays(np.float32, shape, elements=st.floats(-1.5, 1.5, width=32)))
    x = (unit * channel_view(magnitude, len(shape), axis)).astype(np.float32)
    return kind, grid, x


@st.composite
def lut_cases(draw):
    bits = draw(st.integers(2, 16))
    lut_bits = draw(st.integers(2, 16))
    signed = draw(st.booleans())
    lo, hi = (-2 ** (lut_bits - 1), 2 ** (lut_bits - 1) - 1) if signed else (0, 2 ** lut_bits - 1)
    size = draw(st.integers(1, min(2 ** bits, 2 ** lut_bits, 32)))
    lut = draw(st.lists(st.integers(lo, hi), min_size=size, max_size=size))
    shape, axis, c = draw(shapes_and_axes())
    t = per_channel(draw(st.lists(positive, min_size=c, max_size=c)), axis)
    pot = draw(st.booleans())
    method = 1 if pot else 4  # QuantizationMethod.LUT_POT_QUANTIZER / LUT_SYM_QUANTIZER
    grid = qm.lut_grid(lut, t, lut_values_bitwidth=lut_bits, signed=signed, axis=axis, power_of_two=pot)
    unit = draw(hnp.arrays(np.float32, shape, elements=st.floats(-1.5, 1.5, width=32)))
    x = (unit * channel_view(grid.threshold, len(shape), axis)).astype(np.float32)
    return grid, x, (method, bits, {THRESHOLD: t, LUT_VALUES: np.array(lut), SIGNED: signed,
                                    qm.LUT_VALUES_BITWIDTH_KEY: lut_bits}, axis)


# ----------------------------------------------------------------------------- affine properties
@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(case=affine_cases())
def test_results_lie_on_the_grid(case, backend):
    _, grid, x = case
    q = apply(qm.quantize, x, backend, grid)
    assert q.dtype == np.float32 and q.shape == x.shape
    assert np.array_equal(q, np.round(q)) and q.min() >= grid.qmin and q.max() <= grid.qmax
    fq = apply(qm.fake_quantize, x, backend, grid)
    assert fq.dtype == np.float32 and fq.shape == x.shape
    exact = np.atleast_2d(qm.grid_values(grid, dtype=np.float32))  # (C or 1, levels)
    reference = np.atleast_2d(qm.grid_values(grid))
    for c, (row, q_row) in enumerate(zip(channel_rows(fq, grid.axis), channel_rows(q, grid.axis))):
        r = min(c, len(exact) - 1)
        assert np.isin(row, exact[r]).all()  # bitwise members of the float32 grid
        expected = reference[r][(q_row - grid.qmin).astype(np.int64)]
        np.testing.assert_allclose(row, expected, rtol=2 * EPS32, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(case=affine_cases())
def test_fake_quantize_is_idempotent(case, backend):
    _, grid, x = case
    once = apply(qm.fake_quantize, x, backend, grid)
    twice = apply(qm.fake_quantize, once, backend, grid)
    assert np.array_equal(once.view(np.uint32), twice.view(np.uint32))


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(case=affine_cases())
def test_error_is_at_most_half_a_step_inside_the_range(case, backend):
    _, grid, x = case
    lo, hi = qm.grid_range(grid)
    view = lambda p: channel_view(p, x.ndim, grid.axis)  # noqa: E731
    inside = np.clip(x, view(lo), view(hi)).astype(np.float32)
    err = np.abs(apply(qm.fake_quantize, inside, backend, grid).astype(np.float64) - inside)
    scale = view(np.asarray(grid.scale))
    assert (err <= scale / 2 * (1 + 1e-6) + 4 * EPS32 * (np.abs(inside) + scale)).all()


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(case=affine_cases(kinds=("uniform",)))
def test_uniform_zero_is_exact(case, backend):
    _, grid, x = case
    zeros = np.zeros_like(x)
    assert np.array_equal(apply(qm.fake_quantize, zeros, backend, grid), zeros)
    assert (qm.grid_values(grid) == 0).any(axis=-1).all()
    assert np.array_equal(np.round(np.asarray(grid.zero_point)), np.asarray(grid.zero_point))


@SETTINGS
@given(lo=st.floats(-1e3, 1e3), width=st.floats(0, 1e3), n_bits=st.integers(2, 16))
def test_fix_range_includes_zero_on_the_grid(lo, width, n_bits):
    hi = lo + width
    new_lo, new_hi = qm.fix_range_to_include_zero(lo, hi, n_bits)
    assert new_lo <= 0 <= new_hi
    levels = 2 ** n_bits - 1
    if width >= MIN_THRESHOLD and lo < 0 < hi:  # straddling: width kept, zero a whole number of steps up
        np.testing.assert_allclose(new_hi - new_lo, width, rtol=1e-9)
        steps = -new_lo / (width / levels)
        assert abs(steps - round(steps)) < 1e-6
    assert new_hi - new_lo >= MIN_THRESHOLD * (1 - 1e-12)  # narrow ranges are widened: no zero scale
    grid = qm.uniform_grid(lo, hi, n_bits)
    np.testing.assert_allclose(qm.grid_range(grid), (new_lo, new_hi), rtol=1e-9, atol=1e-12)


@SETTINGS
@given(t=st.one_of(st.floats(1e-30, 1e30), st.sampled_from([2.0 ** k for k in range(-20, 20)])))
def test_power_of_two_threshold_is_a_power_of_two_not_below_the_input(t):
    for value, out in [(t, qm.power_of_two_threshold(t)),
                       (np.array([t, 2 * t]), qm.power_of_two_threshold(np.array([t, 2 * t]))),
                       (torch.tensor([t], dtype=torch.float64),
                        qm.power_of_two_threshold(torch.tensor([t], dtype=torch.float64)).numpy())]:
        out, value = np.atleast_1d(out), np.asarray(value, dtype=np.float64)
        assert (np.frexp(out)[0] == 0.5).all()  # log2 integral
        assert (out >= value).all() and (out >= MIN_THRESHOLD).all()
        assert (out < 2 * np.maximum(value, MIN_THRESHOLD)).all()  # the smallest such power
    grid = qm.power_of_two_grid(t, 8)
    assert np.frexp(grid.scale * 128)[0] == 0.5


@SETTINGS
@given(case=affine_cases())
def test_numpy_and_torch_agree_bitwise(case):
    _, grid, x = case
    for fn in (qm.quantize, qm.fake_quantize):
        assert np.array_equal(apply(fn, x, "numpy", grid), apply(fn, x, "torch", grid))
    q = qm.quantize(x, grid)
    assert np.array_equal(qm.dequantize(q, grid), qm.dequantize(torch.from_numpy(q), grid).numpy())


# ----------------------------------------------------------------------------- LUT properties
@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@given(case=lut_cases())
def test_lut_results_are_table_members_and_idempotent(case, backend):
    grid, x, _ = case
    idx = apply(qm.lut_quantize, x, backend, grid)
    assert idx.dtype == np.int64 and idx.min() >= 0 and idx.max() < grid.lut_values.size
    # Brute-force reference: argmin over the whole table (first index on ties).
    t = channel_view(np.asarray(grid.threshold), x.ndim, grid.axis)
    lo, hi = grid.int_range
    xs = np.clip(x / t.astype(np.float32) * np.float32(grid.multiplier), lo, hi)
    assert np.array_equal(idx, np.argmin(np.abs(xs[..., None] - grid.lut_values.astype(np.float32)), axis=-1))
    fq = apply(qm.lut_fake_quantize, x, backend, grid)
    assert fq.dtype == np.float32
    members = grid.lut_values.astype(np.float64) * t[..., None] / grid.multiplier  # (.., 1, K) per channel
    assert np.isclose(fq[..., None], members, rtol=2 * EPS32, atol=0).any(axis=-1).all()
    assert np.array_equal(apply(qm.lut_fake_quantize, fq, backend, grid), fq)
    assert np.array_equal(fq, apply(qm.fake_quantize, x, backend, grid))  # fake_quantize dispatches


@SETTINGS
@given(case=lut_cases())
def test_lut_numpy_torch_and_make_grid_agree(case):
    grid, x, (method, bits, params, axis) = case
    assert np.array_equal(apply(qm.lut_quantize, x, "numpy", grid), apply(qm.lut_quantize, x, "torch", grid))
    fq = apply(qm.lut_fake_quantize, x, "numpy", grid)
    assert np.array_equal(fq, apply(qm.lut_fake_quantize, x, "torch", grid))
    assert qm.make_grid(method, bits, params, axis=axis) == grid
    assert np.array_equal(fq, qm.fake_quantize_with(method, bits, params, x, axis=axis))


# ----------------------------------------------------------------------------- hand-computed values
def test_symmetric_hand_computed():
    g = qm.symmetric_grid(1.0, 8)
    assert (g.scale, g.zero_point, g.qmin, g.qmax) == (1 / 128, 0.0, -128, 127)
    x = np.array([0.3, -0.3, 2.5 / 128, 3.5 / 128, -2.5 / 128, 5.0, -5.0])
    np.testing.assert_array_equal(qm.quantize(x, g), [38, -38, 2, 4, -2, 127, -128])  # half to even
    np.testing.assert_array_equal(qm.fake_quantize(x, g), np.array([38, -38, 2, 4, -2, 127, -128]) / 128)
    u = qm.symmetric_grid(1.0, 8, signed=False)
    assert (u.scale, u.qmin, u.qmax) == (1 / 256, 0, 255)
    np.testing.assert_array_equal(qm.fake_quantize(np.array([0.3, -0.5, 1.0]), u), [77 / 256, 0, 255 / 256])
    pc = qm.symmetric_grid([1.0, 2.0], 4, axis=-1)
    np.testing.assert_array_equal(qm.fake_quantize(np.array([[0.3, 0.3], [9.0, -9.0]]), pc),
                                  [[2 / 8, 0.25], [7 / 8, -2.0]])


def test_power_of_two_hand_computed():
    assert qm.power_of_two_threshold(3.0) == 4.0 and qm.power_of_two_threshold(4.0) == 4.0
    assert qm.power_of_two_threshold(np.nextafter(1024.0, 2048.0)) == 2048.0
    assert qm.power_of_two_threshold(1e-9) == MIN_THRESHOLD
    assert qm.power_of_two_threshold(1e-9, min_threshold=2.0 ** -40) == 2.0 ** -29
    g = qm.power_of_two_grid(3.0, 8)
    assert g.scale == 4 / 128
    assert qm.fake_quantize(0.3, g) == round(0.3 * 32) / 32 == 0.3125


def test_uniform_hand_computed():
    assert qm.fix_range_to_include_zero(0.5, 2.0, 8) == (0.0, 2.0)
    assert qm.fix_range_to_include_zero(-2.0, -0.5, 8) == (-2.0, 0.0)
    lo, hi = qm.fix_range_to_include_zero(-0.3, 1.0, 4)  # scale 1.3/15, zp round(3.46) = 3
    assert lo == pytest.approx(-0.26) and hi == pytest.approx(1.04)
    g = qm.uniform_grid(-0.3, 1.0, 4)
    assert g.scale == pytest.approx(1.3 / 15) and g.zero_point == 3.0 and (g.qmin, g.qmax) == (0, 15)
    np.testing.assert_array_equal(qm.quantize(np.array([0.5, 0.0, -1.0, 2.0]), g), [9, 3, 0, 15])
    np.testing.assert_allclose(qm.fake_quantize(np.array([0.5, 0.0, -1.0]), g), [0.52, 0.0, -0.26])
    empty = qm.uniform_grid(0.0, 0.0, 8)  # zero width: tiny positive scale, no division by zero
    assert empty.scale > 0 and empty.zero_point == 0.0
    assert qm.fake_quantize(np.zeros(3), empty).tolist() == [0.0, 0.0, 0.0]
    pc = qm.uniform_grid([0.0, -1.0], [1.0, 0.0], 8, axis=0)
    np.testing.assert_array_equal(pc.zero_point, [0.0, 255.0])
    assert qm.grid_values(pc).shape == (2, 256)


def test_lut_hand_computed():
    g = qm.lut_grid([-100, -3, 5, 90], 1.0)
    x = np.array([0.0, 1.0, -1.0, 0.7])
    np.testing.assert_array_equal(qm.lut_quantize(x, g), [1, 3, 0, 3])
    np.testing.assert_array_equal(qm.lut_fake_quantize(x, g), np.array([-3, 90, -100, 90]) / 128)
    assert qm.lut_quantize(0.0, qm.lut_grid([-2, 2], 1.0)) == 0  # tie: smaller index
    assert qm.lut_quantize(0.0, qm.lut_grid([2, -2], 1.0)) == 0
    pot = qm.lut_grid([-128, 64], 3.0, power_of_two=True)
    assert pot.threshold == 4.0 and qm.lut_fake_quantize(-9.0, pot) == -4.0
    unsigned = qm.lut_grid([0, 10, 255], 1.0, signed=False)
    np.testing.assert_array_equal(qm.lut_fake_quantize(np.array([-1.0, 0.03, 2.0]), unsigned),
                                  np.array([0, 10, 255]) / 256)
    np.testing.assert_array_equal(qm.lut_dequantize(np.array([3, 0]), g), [90 / 128, -100 / 128])


def test_make_grid_dispatch():
    t = {THRESHOLD: 3.0, SIGNED: False}
    assert qm.make_grid(qm_method("POWER_OF_TWO"), 8, t) == qm.power_of_two_grid(3.0, 8, signed=False)
    assert qm.make_grid(2, 8, t) == qm.symmetric_grid(3.0, 8, signed=False)
    assert qm.make_grid(3, 4, {RANGE_MIN: -0.3, RANGE_MAX: 1.0}) == qm.uniform_grid(-0.3, 1.0, 4)
    assert qm.make_grid(0, 8, {THRESHOLD: 3.0}).qmin == -128  # is_signed defaults to True
    x = np.array([0.3, 7.0])
    np.testing.assert_array_equal(qm.fake_quantize_with(2, 8, {THRESHOLD: 1.0}, x), [38 / 128, 127 / 128])


def test_per_channel_view_and_grid_equality():
    x = np.zeros((2, 3, 4), np.float32)
    assert qm.per_channel_view(np.arange(3.0), x, axis=1).shape == (1, 3, 1)
    assert qm.per_channel_view(np.arange(4.0), x, axis=-1).dtype == np.float32
    assert tuple(qm.per_channel_view(np.arange(2.0), torch.from_numpy(x), axis=0).shape) == (2, 1, 1)
    assert qm.per_channel_view(2.0, x).shape == ()
    a, b = qm.symmetric_grid([1.0, 2.0], 8, axis=0), qm.symmetric_grid(np.array([1.0, 2.0]), 8, axis=0)
    assert a == b and hash(a) == hash(b) and a != qm.symmetric_grid([1.0, 3.0], 8, axis=0)
    assert len({qm.lut_grid([1, 2], 1.0), qm.lut_grid(np.array([1, 2]), 1.0)}) == 1


# ----------------------------------------------------------------------------- dtypes, autograd, import
def test_dtypes_and_autograd():
    g = qm.symmetric_grid(1.0, 8)
    assert qm.fake_quantize(torch.ones(3, dtype=torch.bfloat16), g).dtype == torch.bfloat16
    assert qm.fake_quantize(np.ones(3, np.float16), g).dtype == np.float16
    assert qm.fake_quantize(np.ones(3), g).dtype == np.float64
    assert qm.quantize(np.float16([0.5]), qm.uniform_grid(0.0, 1.0, 16)).tolist() == [32768.0]  # fp32
    assert qm.fake_quantize(torch.arange(3), g).dtype == torch.get_default_dtype()
    scale = torch.tensor(0.1, requires_grad=True)
    x = torch.randn(10, requires_grad=True)
    before = x.detach().clone()
    qm.fake_quantize(x, qm.AffineGrid(scale, 0.0, -8, 7)).sum().backward()
    assert scale.grad is not None and x.grad is not None and torch.equal(x.detach(), before)


def test_core_imports_without_torch():
    code = "import sys, hwquant.core.numerics.quant_math; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------- bad parameters
@pytest.mark.parametrize("build, pattern", [
    (lambda: qm.symmetric_grid(1.0, 1), r"n_bits must be an int in \[2, 16\], got 1"),
    (lambda: qm.symmetric_grid(1.0, 17), r"n_bits .* got 17"),
    (lambda: qm.power_of_two_grid(1.0, 8.0), r"n_bits .* got 8.0"),
    (lambda: qm.uniform_grid(0.0, 1.0, 1), r"n_bits .* got 1"),
    (lambda: qm.fix_range_to_include_zero(0.0, 1.0, 17), r"n_bits .* got 17"),
    (lambda: qm.symmetric_grid(0.0, 8), r"threshold must be finite and > 0, got 0.0"),
    (lambda: qm.power_of_two_grid(-1.0, 8), r"threshold .* got -1.0"),
    (lambda: qm.symmetric_grid(float("nan"), 8), r"threshold .* got nan"),
    (lambda: qm.symmetric_grid(float("inf"), 8), r"threshold .* got inf"),
    (lambda: qm.symmetric_grid([1.0, -2.0], 8, axis=0), r"threshold .* got \[-2.0\] at channels \[1\]"),
    (lambda: qm.symmetric_grid([1.0, 2.0], 8), r"threshold must be a scalar for a per-tensor grid"),
    (lambda: qm.power_of_two_threshold(0.0), r"threshold .* > 0"),
    (lambda: qm.power_of_two_threshold(torch.tensor([1.0, float("nan")])), r"threshold .* > 0"),
    (lambda: qm.uniform_grid(2.0, 1.0, 8), r"range_min must be <= range_max, got range_min=\[2.0\] > "
                                           r"range_max=\[1.0\]"),
    (lambda: qm.fix_range_to_include_zero(2.0, 1.0, 8), r"range_min must be <= range_max"),
    (lambda: qm.uniform_grid(float("nan"), 1.0, 8), r"range_min must be finite"),
    (lambda: qm.uniform_grid([0.0, 3.0], [1.0, 2.0], 8, axis=0), r"range_min=\[3.0\] > range_max=\[2.0\]"),
    (lambda: qm.lut_grid([-129, 0], 1.0), r"lut_values must be .* integers in \[-128, 127\]"),
    (lambda: qm.lut_grid([0.5], 1.0), r"lut_values"),
    (lambda: qm.lut_grid([-1], 1.0, signed=False), r"lut_values .* \[0, 255\]"),
    (lambda: qm.lut_grid([1], 1.0, lut_values_bitwidth=17),
     r"lut_values_bitwidth must be an int in \[2, 16\]"),
    (lambda: qm.lut_grid([1], 0.0), r"threshold"),
    (lambda: qm.make_grid(1, 2, {THRESHOLD: 1.0, LUT_VALUES: [1, 2, 3, 4, 5]}), r"at most 2\*\*n_bits = 4"),
    (lambda: qm.make_grid(2, 8, {}), r"need key 'threshold'"),
    (lambda: qm.make_grid(9, 8, {THRESHOLD: 1.0}), r"method must be one of"),
    (lambda: qm.make_grid(2, 1, {THRESHOLD: 1.0}), r"n_bits"),
    (lambda: qm.fake_quantize(np.zeros((2, 3)), qm.AffineGrid(np.ones(2), np.zeros(2), -8, 7, axis=1)),
     r"does not match the 3 channels"),
    (lambda: qm.quantize(np.zeros(3), qm.symmetric_grid([1.0], 8, axis=2)), r"axis must be in \[-1, 0\]"),
    (lambda: qm.AffineGrid(np.ones(2), np.zeros(2), -8, 7), r"per-tensor grid"),
    (lambda: qm.AffineGrid(1.0, 0.0, 7, 7), r"qmin < qmax"),
])
def test_bad_parameters_raise_helpful_value_errors(build, pattern):
    with pytest.raises(ValueError, match=pattern):
        build()


def test_torch_tensors_keep_torch_arithmetic_whichever_package_loads_first():
    """On Keras' torch backend Keras' namespace also owns torch tensors; when hwquant.keras loads before
    hwquant.torch, a PyTorch quantizer's lookup-table grid must still run in torch (a fresh interpreter: the
    import order is the point)."""
    pytest.importorskip("keras")
    code = ("import os; os.environ['KERAS_BACKEND'] = 'torch'\n"
            "import numpy as np, hwquant.keras, hwquant.torch, torch\n"
            "from hwquant.core.numerics import quant_math as qm\n"
            "g = qm.lut_grid(np.array([-100, -3, 0, 7, 90]), np.array(2.0), 8, True)\n"
            "x = torch.linspace(-2, 2, 11)\n"
            "print(qm.namespace_of(x).module is torch, torch.equal(qm.lut_fake_quantize(x, g), "
            "torch.as_tensor(qm.lut_fake_quantize(x.numpy().astype(np.float64), g), dtype=torch.float32)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True"]
