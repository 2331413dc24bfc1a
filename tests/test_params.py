"""Tests of hwquant.core.statistics.parameter_search: threshold / range / lookup-table selection for weights and activations."""
import math

import numpy as np
import pytest

from hwquant.constants import LUT_VALUES, MIN_THRESHOLD, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core.numerics import quant_math as qm
from hwquant.core.configuration.config import QuantizationErrorMethod as E
from hwquant.core.statistics.parameter_search import activation_quantization_params, lut_kmeans_1d, weights_quantization_params
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.tpc.enums import QuantizationMethod as Q
from hwquant.tpc.enums import Signedness

AFFINE = [Q.POWER_OF_TWO, Q.SYMMETRIC, Q.UNIFORM]
LUT = [Q.LUT_POT_QUANTIZER, Q.LUT_SYM_QUANTIZER]
ERRORS = [E.NOCLIPPING, E.MSE, E.MAE, E.LP, E.KL, E.HMSE]
P_OF = {E.MSE: 2, E.MAE: 1, E.LP: 3}


def gaussian(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def stats_of(x, **kw):
    return TensorStatistics(**kw).update(x)


def error(x, method, n_bits, params, p, axis=None):
    """mean |x - fq(x)|**p, straight through quant_math (per channel along axis: one value per channel)."""
    d = np.abs(qm.fake_quantize_with(method, n_bits, params, x, axis).astype(np.float64) - x) ** p
    return d.mean() if axis is None else np.moveaxis(d, axis, 0).reshape(x.shape[axis], -1).mean(axis=1)


def check_valid(method, n_bits, params, channels=None, activation=False):
    expected = {Q.UNIFORM: {RANGE_MIN, RANGE_MAX}}.get(method, {THRESHOLD})
    if method.is_lut:
        expected = {LUT_VALUES, THRESHOLD}
    if activation and method != Q.UNIFORM:
        expected = expected | {SIGNED}
    assert set(params) == expected
    for key in expected - {LUT_VALUES, SIGNED}:
        v = params[key]
        if channels is None:
            assert isinstance(v, float) and math.isfinite(v)
        else:
            assert isinstance(v, np.ndarray) and v.shape == (channels,) and np.isfinite(v).all()
    if THRESHOLD in params:
        assert np.all(np.asarray(params[THRESHOLD]) > 0)
    if SIGNED in params:
        assert isinstance(params[SIGNED], bool)
    qm.make_grid(method, n_bits, params, axis=None if channels is None else 0)  # the grid is valid


# ---------------------------------------------------------------------------------------------- weights
@pytest.mark.parametrize("method", AFFINE + LUT)
@pytest.mark.parametrize("err", ERRORS)
def test_weights_params_are_valid(method, err):
    w = gaussian((8, 3, 3, 3), scale=0.1)
    check_valid(method, 4, weights_quantization_params(method, 4, err, w, None, False))
    pc = weights_quantization_params(method, 4, err, w, 0, True)
    check_valid(method, 4, pc, channels=8)


@pytest.mark.parametrize("method", AFFINE)
@pytest.mark.parametrize("err", [E.MSE, E.MAE, E.LP])
@pytest.mark.parametrize("n_bits", [2, 4, 8])
def test_weights_search_never_worse_than_no_clipping(method, err, n_bits):
    w = gaussian((16, 64), seed=n_bits)
    w[3, 5] = 9.0  # an outlier in one channel
    p = P_OF[err]
    for axis, pc in [(None, False), (0, True)]:
        chosen = weights_quantization_params(method, n_bits, err, w, axis, pc, l_p_value=3)
        base = weights_quantization_params(method, n_bits, E.NOCLIPPING, w, axis, pc)
        e_chosen, e_base = error(w, method, n_bits, chosen, p, axis), error(w, method, n_bits, base, p, axis)
        assert np.all(e_chosen <= e_base * (1 + 1e-6))
        if n_bits <= 4 and method != Q.POWER_OF_TWO:  # (at 8 bits keeping the outlier may be best)
            assert np.any(e_chosen < e_base)  # and it does find something better somewhere


def test_mse_clips_a_gaussian_with_an_outlier():
    w = gaussian(4096, seed=1)
    w[17] = 12.0
    for method in (Q.SYMMETRIC, Q.POWER_OF_TWO):
        t = weights_quantization_params(method, 4, E.MSE, w, None, False)[THRESHOLD]
        no = weights_quantization_params(method, 4, E.NOCLIPPING, w, None, False)[THRESHOLD]
        assert t < 0.5 * no
        a = activation_quantization_params(method, 4, E.MSE, stats_of(w))[THRESHOLD]
        assert a < 0.5 * no
    # no clipping: the top value of the grid, one step below the threshold, holds the maximum
    assert weights_quantization_params(Q.SYMMETRIC, 8, E.NOCLIPPING, w, None, False)[THRESHOLD] == pytest.approx(12.0 * 128 / 127)
    assert weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, w, None, False)[THRESHOLD] * 127 / 128 < 12.0  # clips it
    rng = weights_quantization_params(Q.UNIFORM, 4, E.MSE, w, None, False)
    assert rng[RANGE_MAX] < 6.0


@pytest.mark.parametrize("err", ERRORS)
def test_pot_thresholds_are_powers_of_two(err):
    w = gaussian((6, 50), seed=2, scale=0.37)
    for pc, axis in [(False, None), (True, 0)]:
        t = np.atleast_1d(weights_quantization_params(Q.POWER_OF_TWO, 5, err, w, axis, pc)[THRESHOLD])
        m, _ = np.frexp(t)
        assert np.all(m == 0.5)
    t = activation_quantization_params(Q.POWER_OF_TWO, 5, err, stats_of(w))[THRESHOLD]
    assert math.frexp(t)[0] == 0.5
    t = weights_quantization_params(Q.LUT_POT_QUANTIZER, 3, err, w, 0, True)[THRESHOLD]
    assert np.all(np.frexp(t)[0] == 0.5)


@pytest.mark.parametrize("err", ERRORS)
def test_uniform_ranges_contain_zero_on_the_grid(err):
    w = gaussian((5, 40), seed=3) + np.array([[3.0], [-3.0], [0.0], [10.0], [-0.5]], np.float32)
    for pc, axis in [(False, None), (True, 0)]:
        r = weights_quantization_params(Q.UNIFORM, 6, err, w, axis, pc)
        lo, hi = np.atleast_1d(r[RANGE_MIN]), np.atleast_1d(r[RANGE_MAX])
        assert np.all(lo <= 0) and np.all(hi >= 0) and np.all(hi > lo)
        zero = qm.fake_quantize(np.zeros((lo.size, 1)), qm.uniform_grid(lo, hi, 6, axis=0))
        assert np.all(zero == 0)
    r = activation_quantization_params(Q.UNIFORM, 6, err, stats_of(np.abs(w) + 0.5))
    assert r[RANGE_MIN] == 0.0 and r[RANGE_MAX] > 0  # all-positive data: the range starts at zero


@pytest.mark.parametrize("method", AFFINE + LUT)
@pytest.mark.parametrize("err", ERRORS)
def test_per_channel_equals_per_tensor_channel_by_channel(method, err):
    w = gaussian((3, 3, 4, 7), seed=4) * np.array([0.1, 1.0, 5.0, 0.01], np.float32)[None, None, :, None]
    axis = 2
    pc = weights_quantization_params(method, 4, err, w, axis, True)
    for c in range(w.shape[axis]):
        one = weights_quantization_params(method, 4, err, np.take(w, c, axis=axis), None, False)
        for key in one:
            if key == LUT_VALUES:
                continue  # the table is shared by all channels
            assert pc[key][c] == one[key], (key, c)


def test_weights_channel_axis_and_errors():
    w = gaussian((4, 5), seed=5)
    a = weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, w, -1, True)[THRESHOLD]
    b = weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, w.T.copy(), 0, True)[THRESHOLD]
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="channel_axis"):
        weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, w, None, True)
    with pytest.raises(ValueError, match="channel_axis"):
        weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, w, 2, True)
    with pytest.raises(ValueError, match="n_bits"):
        weights_quantization_params(Q.SYMMETRIC, 1, E.MSE, w, 0, True)
    with pytest.raises(ValueError, match="NaN or inf"):
        weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, np.array([1.0, np.nan]), None, False)
    with pytest.raises(ValueError, match="min_threshold"):
        weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, w, 0, True, min_threshold=0.0)
    with pytest.raises(ValueError, match="error_method"):
        weights_quantization_params(Q.SYMMETRIC, 8, 3, w, 0, True)


@pytest.mark.parametrize("method", AFFINE + LUT)
@pytest.mark.parametrize("err", ERRORS)
def test_all_zero_tensors_give_tiny_valid_params(method, err):
    w = np.zeros((4, 9), np.float32)
    r = weights_quantization_params(method, 8, err, w, 0, True)
    check_valid(method, 8, r, channels=4)
    assert np.all(qm.fake_quantize_with(method, 8, r, w, axis=0) == 0)
    a = activation_quantization_params(method, 8, err, stats_of(w))
    check_valid(method, 8, a, activation=True)
    assert np.all(qm.fake_quantize_with(method, 8, a, w) == 0)
    if THRESHOLD in r:
        assert np.all(np.asarray(r[THRESHOLD]) <= 2 * MIN_THRESHOLD)


@pytest.mark.parametrize("method", AFFINE + LUT)
@pytest.mark.parametrize("err", [E.NOCLIPPING, E.MSE, E.KL])
def test_min_threshold_is_respected(method, err):
    w = gaussian((3, 20), seed=6, scale=1e-5)
    r = weights_quantization_params(method, 8, err, w, 0, True, min_threshold=1e-3)
    a = activation_quantization_params(method, 8, err, stats_of(w), min_threshold=1e-3)
    for params in (r, a):
        if THRESHOLD in params:
            assert np.all(np.asarray(params[THRESHOLD]) >= 1e-3)
        else:
            assert np.all(np.asarray(params[RANGE_MAX]) - np.asarray(params[RANGE_MIN]) >= 1e-3 * (1 - 1e-9))


@pytest.mark.parametrize("n_bits", [2, 3, 5, 8, 12, 16])
@pytest.mark.parametrize("method", AFFINE)
def test_every_bit_width(n_bits, method):
    w = gaussian((4, 33), seed=n_bits)
    check_valid(method, n_bits, weights_quantization_params(method, n_bits, E.MSE, w, 0, True), channels=4)
    check_valid(method, n_bits, activation_quantization_params(method, n_bits, E.KL, stats_of(w)),
                activation=True)


def test_more_bits_clip_less():
    w = gaussian(5000, seed=7)
    t = [weights_quantization_params(Q.SYMMETRIC, b, E.MSE, w, None, False)[THRESHOLD] for b in (2, 4, 8)]
    assert t[0] < t[1] < t[2] <= 1.3 * np.abs(w).max()  # (8 bits: a step just above max|w| may round best)


@pytest.mark.parametrize("method", AFFINE)
@pytest.mark.parametrize("err", [E.MSE, E.LP, E.KL])
def test_results_do_not_depend_on_chunking(method, err, monkeypatch):
    import hwquant.core.statistics.parameter_search as params_module
    w = gaussian((6, 300), seed=17)
    ref = [weights_quantization_params(method, 4, err, w, axis, pc, l_p_value=3) for axis, pc in ((0, True), (None, False))]
    monkeypatch.setattr(params_module, "_CHUNK", 500)  # forces row and column chunks
    got = [weights_quantization_params(method, 4, err, w, axis, pc, l_p_value=3) for axis, pc in ((0, True), (None, False))]
    for a, b in zip(ref, got):
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-12)


# ---------------------------------------------------------------------------------------------- activations
@pytest.mark.parametrize("method", AFFINE + LUT)
@pytest.mark.parametrize("err", ERRORS)
def test_activation_params_are_valid(method, err):
    s = TensorStatistics()
    for i in range(4):
        s.update(gaussian((2, 3, 8, 8), seed=i) + 0.5)
    check_valid(method, 8, activation_quantization_params(method, 8, err, s), activation=True)


@pytest.mark.parametrize("method", AFFINE)
@pytest.mark.parametrize("err", [E.MSE, E.MAE, E.LP])
def test_activation_search_beats_no_clipping_on_the_data(method, err):
    x = gaussian(50000, seed=8)
    s = stats_of(x, max_hist_samples_per_batch=1 << 30)
    p = P_OF[err]
    chosen = activation_quantization_params(method, 4, err, s, l_p_value=3)
    base = activation_quantization_params(method, 4, E.NOCLIPPING, s)
    assert error(x, method, 4, chosen, p) <= error(x, method, 4, base, p)


def test_activation_no_clipping_values():
    x = np.array([-1.5, 0.25, 3.0], np.float32)
    s = stats_of(x)
    assert activation_quantization_params(Q.SYMMETRIC, 8, E.NOCLIPPING, s) == {THRESHOLD: pytest.approx(3.0 * 128 / 127),
                                                                             SIGNED: True}
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.NOCLIPPING, s) == {THRESHOLD: 4.0, SIGNED: True}
    r = activation_quantization_params(Q.UNIFORM, 8, E.NOCLIPPING, s)
    assert r == dict(zip((RANGE_MIN, RANGE_MAX), qm.fix_range_to_include_zero(-1.5, 3.0, 8)))


def test_signedness_auto_and_forced():
    pos, neg = stats_of(np.abs(gaussian(1000, seed=9))), stats_of(gaussian(1000, seed=9))
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, pos)[SIGNED] is False
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, neg)[SIGNED] is True
    forced = activation_quantization_params(Q.SYMMETRIC, 8, E.MSE, pos, signedness=Signedness.SIGNED)
    assert forced[SIGNED] is True
    unsigned = activation_quantization_params(Q.SYMMETRIC, 8, E.NOCLIPPING, neg, signedness=Signedness.UNSIGNED)
    assert unsigned[SIGNED] is False and unsigned[THRESHOLD] == pytest.approx(neg.max * 256 / 255)  # the positive side
    r = activation_quantization_params(Q.UNIFORM, 8, E.MSE, neg, signedness=Signedness.UNSIGNED)
    assert r[RANGE_MIN] == 0.0
    lut = activation_quantization_params(Q.LUT_POT_QUANTIZER, 3, E.MSE, pos)
    assert lut[SIGNED] is False and lut[LUT_VALUES].min() >= 0


def test_z_threshold_removes_outliers():
    x = gaussian(20000, seed=10)
    x[:5] = 80.0
    s = stats_of(x)
    plain = activation_quantization_params(Q.SYMMETRIC, 8, E.NOCLIPPING, s)[THRESHOLD]
    z = activation_quantization_params(Q.SYMMETRIC, 8, E.NOCLIPPING, s, z_threshold=4.0)[THRESHOLD]
    assert plain == pytest.approx(80.0 * 128 / 127) and z < 10.0
    assert activation_quantization_params(Q.SYMMETRIC, 8, E.MSE, s, z_threshold=math.inf)[THRESHOLD] > 0
    with pytest.raises(ValueError, match="z_threshold"):
        activation_quantization_params(Q.SYMMETRIC, 8, E.MSE, s, z_threshold=0)


def test_kl_clips_a_heavy_tailed_distribution_sensibly():
    x = np.random.default_rng(11).standard_t(2, size=200000).astype(np.float32)
    s = stats_of(x)
    a = np.abs(x)
    t = activation_quantization_params(Q.SYMMETRIC, 8, E.KL, s)[THRESHOLD]
    assert np.quantile(a, 0.99) < t < 0.5 * a.max()
    t_pot = activation_quantization_params(Q.POWER_OF_TWO, 8, E.KL, s)[THRESHOLD]
    assert np.quantile(a, 0.99) < t_pot < 0.5 * a.max()
    t_w = weights_quantization_params(Q.SYMMETRIC, 8, E.KL, x, None, False)[THRESHOLD]
    assert np.quantile(a, 0.99) < t_w < 0.5 * a.max()
    # a Gaussian keeps (almost) its whole range at 8 bits
    g = gaussian(200000, seed=12)
    tg = activation_quantization_params(Q.SYMMETRIC, 8, E.KL, stats_of(g))[THRESHOLD]
    assert tg > 0.6 * np.abs(g).max()


def test_activation_empty_statistics_and_bad_args():
    with pytest.raises(ValueError, match="no activation statistics"):
        activation_quantization_params(Q.SYMMETRIC, 8, E.MSE, TensorStatistics())
    with pytest.raises(TypeError):
        activation_quantization_params(Q.SYMMETRIC, 8, E.MSE, np.ones(3))
    with pytest.raises(ValueError, match="signedness"):
        activation_quantization_params(Q.SYMMETRIC, 8, E.MSE, stats_of(np.ones(3, np.float32)), signedness=7)


# ---------------------------------------------------------------------------------------------- LUT
@pytest.mark.parametrize("method", LUT)
@pytest.mark.parametrize("n_bits", [2, 3, 4])
def test_lut_tables(method, n_bits):
    w = gaussian((16, 3, 3, 3), seed=13, scale=0.2)
    r = weights_quantization_params(method, n_bits, E.MSE, w, 0, True)
    lut = r[LUT_VALUES]
    assert lut.dtype.kind == "i" and lut.ndim == 1
    assert 1 <= lut.size <= 2 ** n_bits and np.all(np.diff(lut) > 0)
    assert lut.min() >= -128 and lut.max() <= 127
    np.testing.assert_array_equal(r[THRESHOLD], np.abs(w).reshape(16, -1).max(axis=1) if method == Q.LUT_SYM_QUANTIZER
                                  else qm.power_of_two_threshold(np.abs(w).reshape(16, -1).max(axis=1)))
    # a LUT beats the uniform power-of-two grid of the same size on a Gaussian
    e_lut = error(w, method, n_bits, r, 2, axis=0).mean()
    pot = weights_quantization_params(Q.POWER_OF_TWO, n_bits, E.MSE, w, 0, True)
    assert e_lut < error(w, Q.POWER_OF_TWO, n_bits, pot, 2, axis=0).mean()
    grid = qm.make_grid(method, n_bits, r, axis=0)
    assert np.allclose(qm.lut_fake_quantize(w, grid), qm.fake_quantize_with(method, n_bits, r, w, axis=0))


def test_lut_with_few_distinct_values_keeps_them_all():
    w = np.array([-1.0, -1.0, 0.0, 0.5, 1.0] * 10, np.float32)
    r = weights_quantization_params(Q.LUT_SYM_QUANTIZER, 4, E.MSE, w, None, False)
    np.testing.assert_array_equal(r[LUT_VALUES], [-128, 0, 64, 127])
    assert np.allclose(qm.fake_quantize_with(Q.LUT_SYM_QUANTIZER, 4, r, w), w, atol=1 / 128)


def test_lut_kmeans_is_optimal_in_1d():
    rng = np.random.default_rng(14)
    v = np.unique(rng.integers(-100, 100, 60)).astype(float)
    w = rng.random(v.size) + 0.1

    def sse(centres):
        d = np.abs(v[:, None] - np.asarray(centres)[None, :]).min(axis=1)
        return float((w * d * d).sum())

    c = lut_kmeans_1d(v, w, 4)
    assert c.size == 4 and np.all(np.diff(c) > 0)
    for seed in range(20):  # no random Lloyd start beats the dynamic programme
        start = np.sort(np.random.default_rng(seed).choice(v, 4, replace=False))
        for _ in range(50):
            cut = np.searchsorted(0.5 * (start[1:] + start[:-1]), v)
            start = np.array([np.average(v[cut == k], weights=w[cut == k]) if np.any(cut == k) else start[k]
                              for k in range(4)])
        assert sse(c) <= sse(start) + 1e-9
    big = np.arange(2000.0)
    assert lut_kmeans_1d(big, np.ones(2000), 8).size == 8  # Lloyd path for many values


def test_kl_never_squeezes_the_range_below_the_grid_resolution():
    """Regression: a tiny threshold that clips everything into two bins made Q equal P (KL ~ 0)."""
    rng = np.random.default_rng(3)
    x = (rng.laplace(size=(64, 16, 8, 8)) * 0.7).astype(np.float32)
    s = TensorStatistics(per_channel=False)
    s.update(x)
    for method in (Q.POWER_OF_TWO, Q.SYMMETRIC):
        t = activation_quantization_params(method, 8, E.KL, s)[THRESHOLD]
        assert t >= 0.1 * float(np.abs(x).max()), (method, t)


def test_weights_search_looks_above_the_no_clipping_threshold():
    """A 3x3 kernel channel has 9 weights: a slightly coarser step can put them nearer its grid
    points than the no-clipping one does; MSE finds it (and it is no worse than no clipping)."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(64, 1, 3, 3))
    t = np.asarray(weights_quantization_params(Q.SYMMETRIC, 8, E.MSE, w, 0, True)[THRESHOLD])
    no = np.asarray(weights_quantization_params(Q.SYMMETRIC, 8, E.NOCLIPPING, w, 0, True)[THRESHOLD])
    assert (t > no * 1.001).sum() >= 16

    def err(thr):
        step = thr.reshape(-1, 1, 1, 1) / 128
        return ((np.clip(np.round(w / step), -128, 127) * step - w) ** 2).sum(axis=(1, 2, 3))
    assert (err(t) <= err(no) + 1e-12).all() and err(t).sum() < 0.8 * err(no).sum()


def test_pot_clip_tolerance_takes_the_lower_power_of_two_only_when_it_clips_a_little():
    # largest value 1.05: the no-clipping power of two is 2; 1 (largest grid value 127/128) clips 5.5 %
    x = np.concatenate([np.random.default_rng(3).uniform(-1, 1, 10000), [1.05]]).astype(np.float32)
    s = stats_of(x)
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.NOCLIPPING, s)[THRESHOLD] == 2.0
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.NOCLIPPING, s, pot_clip_tolerance=0.1)[THRESHOLD] == 1.0
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.NOCLIPPING, s, pot_clip_tolerance=0.05)[THRESHOLD] == 2.0
    # largest value 1.5: the lower power of two would clip a third
    s = stats_of(np.concatenate([x[:-1], [1.5]]).astype(np.float32))
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.NOCLIPPING, s, pot_clip_tolerance=0.1)[THRESHOLD] == 2.0
