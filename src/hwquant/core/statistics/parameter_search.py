"""Selection of quantization parameters (thresholds, ranges, lookup tables), vectorised.

Two entry points:

- :func:`activation_quantization_params` works on the histogram of a :class:`TensorStatistics`;
- :func:`weights_quantization_params` works on the weight array itself, per tensor or per channel.

Both return the params dict that :func:`hwquant.core.numerics.quant_math.make_grid` reads:
POWER_OF_TWO / SYMMETRIC -> ``{THRESHOLD, SIGNED}`` (weights: ``{THRESHOLD}``, always signed),
UNIFORM -> ``{RANGE_MIN, RANGE_MAX}`` (already made to contain zero, with zero on the grid),
LUT_POT_QUANTIZER / LUT_SYM_QUANTIZER -> ``{LUT_VALUES, THRESHOLD}`` (+ ``SIGNED`` for activations).
Per-tensor values are python floats; per-channel values are 1-D float64 arrays over the channels.

Error methods (``QuantizationErrorMethod``):

- NOCLIPPING: the smallest threshold that clips nothing (the grid's top value is one step below the
  threshold, so a positive maximum needs ``max * L / (L - 1)``, L = 2**(n-1) signed or 2**n
  unsigned; power-of-two: rounded up to a power of two); range = [min, max].
- MSE / MAE / LP: mean of ``|x - q(x)|**p`` (p = 2, 1, ``l_p_value``) over the data (weights) or
  over the histogram bin centres weighted by their counts (activations).
- KL: KL divergence between the float histogram and its quantized version, as in the
  calibration literature (and MCT): inside the quantization range, the float distribution P keeps
  its bins and gets the clipped mass added to its first / last non-empty bins; the quantized
  distribution Q gives each quantization level the float mass of the bins that round to it,
  spread evenly over those of its bins that are non-empty. Weights use one histogram per channel.
- HMSE: Hessian-weighted MSE needs Hessian scores that the caller does not have at this point:
  it falls back to MSE here.

Every search includes the no-clipping candidate, so on its own metric the chosen parameters are
never worse than NOCLIPPING. Candidates are scored all at once: the data is broadcast against
every candidate (rows = channels x candidates) and fake-quantized through ``quant_math`` with one
per-row grid, in chunks of about a million values; there is no python loop over candidates, bins
or channels. All rounding / clipping of data onto grids happens in ``quant_math``.

Candidate search:

- POWER_OF_TWO: the no-clipping power of two and the next ``_POT_CANDIDATES - 1`` smaller ones.
- SYMMETRIC: a geometric sweep of thresholds from max|x| down to ``r_min * max|x|`` (weights: from
  ``r_max * max|x|``, evenly spaced above max|x|), then a few rounds of local refinement (evenly
  spaced points between the neighbours of the best one).
- UNIFORM: a sweep of ranges ``[min * r, max * r]`` clipping both ends by a common factor (as for
  SYMMETRIC), then rounds of a 2-D grid over the two factors around the best one, narrowing each
  round. A one-sided range (min >= 0 or max <= 0) searches its only free end.

Thresholds are never below ``min_threshold`` and ranges never narrower than it; a constant-zero
tensor gives ``min_threshold`` (its power of two for POWER_OF_TWO). Framework-free: numpy only.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from hwquant.constants import (LUT_VALUES, LUT_VALUES_BITWIDTH, MAX_N_BITS, MIN_N_BITS, MIN_THRESHOLD, RANGE_MAX,
                               RANGE_MIN, SIGNED, THRESHOLD)
from hwquant.core.numerics.arrays import as_float_array
from hwquant.core.configuration.config import QuantizationErrorMethod
from hwquant.core.numerics.quant_math import (LUT_VALUES_BITWIDTH_KEY, AffineGrid, fake_quantize, fix_range_to_include_zero,
                                              grid_range, power_of_two_threshold, quantize, symmetric_grid, uniform_grid)
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.tpc.enums import QuantizationMethod, Signedness

__all__ = ["activation_quantization_params", "weights_quantization_params", "lut_kmeans_1d"]

# ------------------------------------------------------------------------------------------- search sizes
_POT_CANDIDATES = 10  # no-clipping power of two and 9 halvings (MCT's n_iter)


class _Profile:
    """Sizes of a threshold / range search."""

    def __init__(self, n_coarse: int, r_min: float, n_refine: int, n_stages: int, m_grid: int, n_grid_stages: int,
                 n_above: int = 0, r_max: float = 1.0):
        self.n_coarse, self.r_min, self.n_refine, self.n_stages = n_coarse, r_min, n_refine, n_stages
        self.n_above, self.r_max = n_above, r_max
        self.m_grid, self.n_grid_stages = m_grid, n_grid_stages


# Histograms are cheap (<= 2048 values): a fine sweep. Weights cost per value: a coarser sweep, plus
# thresholds above the no-clipping one: a channel has few distinct weights (9 in a 3x3 depthwise
# kernel), and a slightly coarser step often lands them nearer its grid points (EfficientNet-Lite0:
# kernel SQNR +1 to +3 dB per depthwise layer, weights-only output SQNR 25.1 -> 29.2 dB). A
# histogram's bin centres have no such alignment to gain from.
_ACT = _Profile(n_coarse=64, r_min=1 / 64, n_refine=8, n_stages=2, m_grid=7, n_grid_stages=3)
_WEIGHTS = _Profile(n_coarse=20, r_min=1 / 32, n_refine=8, n_stages=2, m_grid=5, n_grid_stages=3, n_above=60, r_max=1.3)
# Only where a channel has few weights: with many, every threshold aligns about as well, and the weight
# error's small gain above no-clipping is noise that the output pays for (MTCNN O-Net's 256-input face
# classifier: face-probability SQNR 31.8 dB searched above, 36.6 dB not; MCT 35.2).
_WEIGHTS_MANY = _Profile(**{**vars(_WEIGHTS), "n_above": 0, "r_max": 1.0})  # the same search, none above
FEW_WEIGHTS_PER_CHANNEL = 64

_CHUNK = 1 << 18  # values (rows x candidates x columns) fake-quantized at once (fits L2)
_WEIGHT_KL_BINS = (64, 2048)  # per-channel histogram bins for weights KL: clip(K // 4, 64, 2048)

ParamsFn = Callable[..., AffineGrid]  # flat 1-D candidate params -> quant_math grid (axis=0)


# ------------------------------------------------------------------------------------------- validation
def _as_enum(value, enum_cls, name: str):
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a {enum_cls.__name__}, got {value!r}")
    try:
        return enum_cls(int(value))
    except ValueError:
        raise ValueError(f"{name} must be one of {[m.name for m in enum_cls]}, got {value!r}") from None


def _check_common(method, n_bits, error_method, min_threshold, l_p_value):
    method = _as_enum(method, QuantizationMethod, "method")
    error_method = _as_enum(error_method, QuantizationErrorMethod, "error_method")
    if isinstance(n_bits, bool) or not isinstance(n_bits, (int, np.integer)) or \
            not MIN_N_BITS <= n_bits <= MAX_N_BITS:
        raise ValueError(f"n_bits must be an int in [{MIN_N_BITS}, {MAX_N_BITS}], got {n_bits!r}")
    if not (isinstance(min_threshold, (int, float, np.floating, np.integer)) and
            math.isfinite(min_threshold) and min_threshold > 0):
        raise ValueError(f"min_threshold must be finite and > 0, got {min_threshold!r}")
    if isinstance(l_p_value, bool) or not isinstance(l_p_value, (int, np.integer)) or l_p_value < 1:
        raise ValueError(f"l_p_value must be an int >= 1, got {l_p_value!r}")
    if error_method == QuantizationErrorMethod.HMSE:
        error_method = QuantizationErrorMethod.MSE  # needs Hessian scores: see the module docstring
    return method, int(n_bits), error_method, float(min_threshold), int(l_p_value)


# ------------------------------------------------------------------------------------------- errors
def _row_chunks(n_rows: int, per_row: int):
    rows = max(1, _CHUNK // max(per_row, 1))
    for r0 in range(0, n_rows, rows):
        yield r0, min(n_rows, r0 + rows)


def _lp_errors(x: np.ndarray, w: Optional[np.ndarray], params: Sequence[np.ndarray], make: ParamsFn,
               p: int, value_map: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> np.ndarray:
    """(R, T): mean over each row of ``|x - fq(x)|**p`` (weighted by ``w`` when given) for every
    candidate; with ``value_map`` f, of ``|f(x) - f(fq(x))|**p``. x: (R, K) values; params: arrays
    (R, T) of candidate parameters."""
    R, K = x.shape
    T = params[0].shape[1]
    err = np.zeros((R, T))
    cols = K if T * K <= _CHUNK else max(1, _CHUNK // T)
    exact_dtype = np.float64 if p > 2 else None  # |d|**p of float32 would under/overflow
    fx = None if value_map is None else value_map(x)  # f of the data, once for every candidate
    for r0, r1 in _row_chunks(R, T * K):
        r = r1 - r0
        grid = make(*(a[r0:r1].ravel() for a in params))
        for k0 in range(0, K, cols):
            k1 = min(K, k0 + cols)
            xb = np.broadcast_to(x[r0:r1, None, k0:k1], (r, T, k1 - k0)).reshape(r * T, k1 - k0)
            d = fake_quantize(xb, grid)
            d = d.astype(exact_dtype) if exact_dtype else d
            if value_map is None:
                d -= xb
            else:
                assert fx is not None  # computed above whenever value_map is given
                d = (value_map(d).reshape(r, T, k1 - k0) - fx[r0:r1, None, k0:k1]).reshape(r * T, k1 - k0)
            np.abs(d, out=d)
            if p == 2:
                d *= d
            elif p > 2:
                np.power(d, p, out=d)
            d = d.reshape(r, T, k1 - k0)
            if w is None:
                err[r0:r1] += d.sum(axis=2, dtype=np.float64)
            else:
                err[r0:r1] += np.einsum("rtk,rk->rt", d, w[r0:r1, k0:k1])
    total = np.full(R, float(K)) if w is None else w.sum(axis=1)
    return err / np.where(total > 0, total, 1.0)[:, None]


def _kl_errors(c: np.ndarray, h: np.ndarray, params: Sequence[np.ndarray], make: ParamsFn) -> np.ndarray:
    """(R, T): KL(P || Q) of each row's histogram (ascending bin centres ``c``, counts ``h``, both
    (R, B)) against its quantized version under every candidate (module docstring). A candidate
    whose range holds no counted bin scores inf."""
    R, B = c.shape
    T = params[0].shape[1]
    out = np.empty((R, T))
    for r0, r1 in _row_chunks(R, T * B * 4):
        r = r1 - r0
        n = r * T
        grid = make(*(a[r0:r1].ravel() for a in params))
        cb = np.broadcast_to(c[r0:r1, None, :], (r, T, B)).reshape(n, B)
        hb = np.broadcast_to(h[r0:r1, None, :], (r, T, B)).reshape(n, B)
        level = quantize(cb, grid)
        gmin, gmax = (np.broadcast_to(np.asarray(v, np.float64), (n,))[:, None] for v in grid_range(grid))
        half = 0.5 * np.broadcast_to(np.asarray(grid.scale, np.float64), (n,))[:, None]
        below, above = cb < gmin - half, cb > gmax + half
        h_in = np.where(below | above, 0.0, hb)
        pos = h_in > 0
        any_in = pos.any(axis=1)
        first = np.argmax(pos, axis=1)
        last = B - 1 - np.argmax(pos[:, ::-1], axis=1)
        rows = np.arange(n)
        p_hist = h_in.copy()
        p_hist[rows, first] += np.where(below, hb, 0.0).sum(axis=1)
        p_hist[rows, last] += np.where(above, hb, 0.0).sum(axis=1)
        # Q: the mass of each level (runs of equal level along the ascending bins) spread evenly
        run = np.zeros((n, B), np.int64)
        np.cumsum(level[:, 1:] != level[:, :-1], axis=1, out=run[:, 1:])
        run += rows[:, None] * B
        mass = np.bincount(run.ravel(), weights=h_in.ravel(), minlength=n * B)
        npos = np.bincount(run.ravel(), weights=pos.ravel(), minlength=n * B)
        q_hist = np.where(pos, mass[run] / np.maximum(npos[run], 1.0), 0.0)
        p_tot, q_tot = p_hist.sum(axis=1, keepdims=True), q_hist.sum(axis=1, keepdims=True)
        ok = pos & (p_hist > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            pn, qn = p_hist / np.where(p_tot > 0, p_tot, 1.0), q_hist / np.where(q_tot > 0, q_tot, 1.0)
            terms = np.where(ok, pn * np.log(np.where(ok, pn, 1.0) / np.where(ok, qn, 1.0)), 0.0)
        kl = terms.sum(axis=1)
        # Q must be a coarsening of P: a range spanning fewer bins than the grid has levels (e.g. a
        # tiny threshold that squeezes everything into two clipped bins) would score a spurious ~0.
        levels = min(grid.qmax - grid.qmin + 1, B // 2)
        wide_enough = (~(below | above)).sum(axis=1) >= levels
        out[r0:r1] = np.where(any_in & wide_enough, np.maximum(kl, 0.0), np.inf).reshape(r, T)
    return out


def _row_histograms(x: np.ndarray, n_bins: int) -> Tuple[np.ndarray, np.ndarray]:
    """Per-row histograms of (R, K) values over each row's [min, max]: (centres, counts), (R, n_bins)."""
    R, K = x.shape
    lo, hi = x.min(axis=1).astype(np.float64), x.max(axis=1).astype(np.float64)
    width = np.where(hi > lo, (hi - lo) / n_bins, 1.0)
    idx = np.clip(np.floor((x - lo[:, None]) / width[:, None]).astype(np.int64), 0, n_bins - 1)
    idx += np.arange(R)[:, None] * n_bins
    counts = np.bincount(idx.ravel(), minlength=R * n_bins).reshape(R, n_bins).astype(np.float64)
    centres = lo[:, None] + (np.arange(n_bins) + 0.5) * np.where(hi > lo, width, 0.0)[:, None]
    return centres, counts


# ------------------------------------------------------------------------------------------- searches
def _pick(cands: Sequence[np.ndarray], err: np.ndarray):
    """Best candidate of each row (the first of equal errors) and its error."""
    j = np.argmin(err, axis=1)
    rows = np.arange(err.shape[0])
    return tuple(a[rows, j] for a in cands), err[rows, j], j


def _search_threshold(score, base: np.ndarray, min_threshold: float, prof: _Profile) -> np.ndarray:
    """base: (R,) no-clipping thresholds (>= min_threshold). A descending sweep (evenly spaced from
    r_max * base down to base, then geometric down to r_min * base), then refinement."""
    above = np.linspace(prof.r_max, 1.0, prof.n_above + 1)[:-1]
    ratios = np.concatenate([above, np.geomspace(1.0, prof.r_min, prof.n_coarse)])
    cands = np.maximum(base[:, None] * ratios, min_threshold)
    (best,), best_err, j = _pick((cands,), score((cands,)))
    rows = np.arange(base.size)
    hi_b = cands[rows, np.maximum(j - 1, 0)]
    lo_b = cands[rows, np.minimum(j + 1, ratios.size - 1)]
    f = np.linspace(0.0, 1.0, prof.n_refine + 2)[1:-1]
    for _ in range(prof.n_stages):
        new = np.maximum(lo_b[:, None] + (hi_b - lo_b)[:, None] * f, min_threshold)
        (t,), e, _ = _pick((new,), score((new,)))
        better = e < best_err
        best, best_err = np.where(better, t, best), np.where(better, e, best_err)
        step = (hi_b - lo_b) / (prof.n_refine + 1)
        lo_b, hi_b = np.maximum(best - step, min_threshold), np.minimum(best + step, base * prof.r_max)
    return best


def _widen(lo: np.ndarray, hi: np.ndarray, min_width: float) -> Tuple[np.ndarray, np.ndarray]:
    """Ranges narrower than min_width grow upwards (lo <= 0 <= hi keeps holding)."""
    return lo, np.where(hi - lo < min_width, lo + min_width, hi)


def _search_range(score, lo0: np.ndarray, hi0: np.ndarray, min_threshold: float, prof: _Profile):
    """lo0 <= 0 <= hi0: (R,) no-clipping range. Common-factor sweep, then 2-D refinement of the
    factors (a, b) of [lo0 * a, hi0 * b]."""
    R = lo0.size
    ratios = np.geomspace(1.0, prof.r_min, prof.n_coarse)
    lo, hi = _widen(lo0[:, None] * ratios, hi0[:, None] * ratios, min_threshold)
    _, best_err, j = _pick((lo, hi), score((lo, hi)))
    best_a = best_b = ratios[j]
    step = (ratios[np.maximum(j - 1, 0)] - ratios[np.minimum(j + 1, prof.n_coarse - 1)]) / 2
    free_lo, free_hi = bool(np.any(lo0 < 0)), bool(np.any(hi0 > 0))
    offsets = np.linspace(-1.0, 1.0, prof.m_grid)
    for _ in range(prof.n_grid_stages):
        a = np.clip(best_a[:, None] + step[:, None] * (offsets if free_lo else np.zeros(1)), 0.0, 1.0)
        b = np.clip(best_b[:, None] + step[:, None] * (offsets if free_hi else np.zeros(1)), 0.0, 1.0)
        ga, gb = (v.reshape(R, -1) for v in np.broadcast_arrays(a[:, :, None], b[:, None, :]))
        lo, hi = _widen(lo0[:, None] * ga, hi0[:, None] * gb, min_threshold)
        (na, nb), e, _ = _pick((ga, gb), score((lo, hi)))
        better = e < best_err
        best_a, best_b = np.where(better, na, best_a), np.where(better, nb, best_b)
        best_err = np.where(better, e, best_err)
        step = step * 2.0 / max(prof.m_grid - 1, 2)
    return _widen(lo0 * best_a, hi0 * best_b, min_threshold)


# ------------------------------------------------------------------------------------------- k-means
def lut_kmeans_1d(values: np.ndarray, weights: np.ndarray, n_clusters: int) -> np.ndarray:
    """Weighted 1-D k-means of distinct ``values`` (any order) with ``weights`` > 0: the sorted
    cluster centres (at most ``n_clusters``). Exact (optimal) by dynamic programming over the
    sorted values when there are at most 512 of them, else weighted Lloyd iterations from
    weighted-quantile seeds."""
    order = np.argsort(values)
    v, w = np.asarray(values, np.float64)[order], np.asarray(weights, np.float64)[order]
    keep = w > 0
    v, w = v[keep], w[keep]
    n = v.size
    if n == 0:
        return np.zeros(1)
    k = min(int(n_clusters), n)
    if k == n:
        return v
    if n <= 512:
        return _kmeans_dp(v, w, k)
    return _kmeans_lloyd(v, w, k)


def _kmeans_dp(v: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    n = v.size
    c0, c1, c2 = (np.concatenate([[0.0], np.cumsum(a)]) for a in (w, w * v, w * v * v))
    i, j = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = (c2[j] - c2[i]) - (c1[j] - c1[i]) ** 2 / (c0[j] - c0[i])  # points [i, j) as one cluster
    cost = np.where(j > i, np.maximum(cost, 0.0), np.inf)
    best = cost[0].copy()  # best[j]: points [0, j) in m clusters
    back = np.zeros((k, n + 1), np.int64)
    for m in range(1, k):
        total = best[:, None] + cost
        back[m] = np.argmin(total, axis=0)
        best = total[back[m], np.arange(n + 1)]
    bounds, j_end = [], n
    for m in range(k - 1, 0, -1):
        i_start = int(back[m, j_end])
        bounds.append((i_start, j_end))
        j_end = i_start
    bounds.append((0, j_end))
    return np.array(sorted((c1[b] - c1[a]) / (c0[b] - c0[a]) for a, b in bounds if b > a))


def _kmeans_lloyd(v: np.ndarray, w: np.ndarray, k: int, n_iter: int = 100) -> np.ndarray:
    cw = np.cumsum(w)
    centres = np.unique(v[np.searchsorted(cw, (np.arange(k) + 0.5) / k * cw[-1])])
    for _ in range(n_iter):
        cut = np.searchsorted(0.5 * (centres[1:] + centres[:-1]), v)
        sw = np.bincount(cut, weights=w, minlength=centres.size)
        new = np.where(sw > 0, np.bincount(cut, weights=w * v, minlength=centres.size) / np.maximum(sw, 1e-300),
                       centres)
        if np.allclose(new, centres, rtol=0, atol=1e-9):
            break
        centres = np.unique(new)
    return centres


def _lut_table(int_values: np.ndarray, counts: np.ndarray, n_bits: int, bitwidth: int, signed: bool) -> np.ndarray:
    """Integer table (sorted, distinct, in the bitwidth range) from the weighted integer values."""
    values, inverse = np.unique(np.asarray(int_values, np.float64).ravel(), return_inverse=True)
    weights = np.bincount(inverse.ravel(), weights=np.asarray(counts, np.float64).ravel(), minlength=values.size)
    centres = lut_kmeans_1d(values, weights, 2 ** n_bits)
    integers = symmetric_grid(2.0 ** (bitwidth - 1 if signed else bitwidth), bitwidth, signed)  # steps of 1
    return np.unique(quantize(centres, integers)).astype(np.int64)


def _lut_result(table: np.ndarray, threshold, bitwidth: int) -> dict:
    out = {LUT_VALUES: table, THRESHOLD: threshold}
    if bitwidth != LUT_VALUES_BITWIDTH:
        out[LUT_VALUES_BITWIDTH_KEY] = bitwidth
    return out


def _lut_threshold(method: QuantizationMethod, amax: np.ndarray, min_threshold: float) -> np.ndarray:
    base = np.maximum(amax, min_threshold)
    return power_of_two_threshold(base, min_threshold) if method.is_power_of_two else base


# ------------------------------------------------------------------------------------------- shared
def _threshold_maker(n_bits: int, signed: bool) -> ParamsFn:
    # POWER_OF_TWO candidates are exact powers of two already: the symmetric grid of one is the
    # power-of-two grid (power_of_two_grid would round them up again to the same value).
    return lambda t: symmetric_grid(t, n_bits, signed, axis=0)


def _no_clipping_threshold(lo, hi, n_bits: int, signed: bool) -> np.ndarray:
    """The smallest threshold whose grid clips nothing of [lo, hi]: the grid reaches down to -t
    (signed) but its top value is one step below t (``t * (L - 1) / L``, L = 2**(n-1) signed, 2**n
    unsigned), which matters at few bits (4 bits: the max|x| threshold clips the top by 1/8)."""
    levels = 2.0 ** (n_bits - 1 if signed else n_bits)
    top = np.maximum(np.asarray(hi, np.float64), 0.0) * levels / (levels - 1)
    return np.maximum(np.maximum(-np.asarray(lo, np.float64), 0.0), top) if signed else top


def _select(method, n_bits, error_method, scorer, lo0, hi0, signed, min_threshold, prof):
    """Run the search of ``method`` under ``error_method``; (R,) results as a dict of arrays."""
    if method == QuantizationMethod.UNIFORM:
        if error_method == QuantizationErrorMethod.NOCLIPPING:
            lo, hi = _widen(lo0, hi0, min_threshold)
        else:
            score = scorer(lambda range_min, range_max: uniform_grid(range_min, range_max, n_bits, axis=0))
            lo, hi = _search_range(score, lo0, hi0, min_threshold, prof)
        return {RANGE_MIN: lo, RANGE_MAX: hi}
    base = np.maximum(_no_clipping_threshold(lo0, hi0, n_bits, signed), min_threshold)
    pot = method == QuantizationMethod.POWER_OF_TWO
    if pot:
        base = power_of_two_threshold(base, min_threshold)
    if error_method == QuantizationErrorMethod.NOCLIPPING:
        t = base
    elif pot:  # candidates: each no-clipping power of two halved k times, k < _POT_CANDIDATES
        floor = power_of_two_threshold(min_threshold, min_threshold)
        cands = np.maximum(base[:, None] * 2.0 ** -np.arange(_POT_CANDIDATES), floor)
        (t,), _, _ = _pick((cands,), scorer(_threshold_maker(n_bits, signed))((cands,)))
    else:
        t = _search_threshold(scorer(_threshold_maker(n_bits, signed)), base, min_threshold, prof)
    return {THRESHOLD: t}


def _finish(result: dict, n_bits: int, per_channel: bool) -> dict:
    if RANGE_MIN in result:
        lo, hi = fix_range_to_include_zero(result[RANGE_MIN], result[RANGE_MAX], n_bits)
        result = {RANGE_MIN: lo, RANGE_MAX: hi}
    return {key: np.array(v, np.float64) if per_channel else float(np.asarray(v).reshape(-1)[0])
            for key, v in result.items()}


# ------------------------------------------------------------------------------------------- activations
def activation_quantization_params(method, n_bits: int, error_method, stats: TensorStatistics,
                                   signedness=Signedness.AUTO, min_threshold: float = MIN_THRESHOLD,
                                   l_p_value: int = 2, z_threshold: float = math.inf,
                                   lut_values_bitwidth: int = LUT_VALUES_BITWIDTH,
                                   value_map: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                                   pot_clip_tolerance: float = 0.0,
                                   output_range: Optional[Tuple[Optional[float], Optional[float]]] = None) -> dict:
    """Quantization params of an activation from its collected statistics (histogram).

    Returns POWER_OF_TWO / SYMMETRIC: ``{THRESHOLD: float, SIGNED: bool}``; UNIFORM:
    ``{RANGE_MIN: float, RANGE_MAX: float}`` (contains zero, zero on the grid); LUT_POT_QUANTIZER /
    LUT_SYM_QUANTIZER: ``{LUT_VALUES: int64 array, THRESHOLD: float, SIGNED: bool}`` (weighted
    k-means of the histogram on the signed / unsigned ``lut_values_bitwidth``-bit integers; the
    error method does not apply, as in MCT).

    ``signed`` is ``stats.min < 0`` for Signedness.AUTO, else forced (an unsigned grid clips the
    negatives to 0; UNIFORM with Signedness.UNSIGNED drops the negative side of the range).
    ``z_threshold`` (finite) first drops the histogram mass outside mean +- z * std (and clips the
    range to it). Errors are computed on the histogram bin centres weighted by their counts.
    HMSE falls back to MSE (no Hessian scores here). ``value_map`` f (numpy, element-wise): the
    MSE / MAE / LP errors compare f(x) with f(q(x)), the values the tensor's reader passes on
    (core/statistics/consumer_error.py); KL and NOCLIPPING ignore it. ``pot_clip_tolerance`` (NOCLIPPING,
    POWER_OF_TWO): take the power of two below the no-clipping one when its largest grid value is
    within this fraction of the largest magnitude.

    ``output_range`` (min, max): the range the node's operator bounds its output to (softmax and
    sigmoid [0, 1], tanh [-1, 1]: the FrameworkInfo's min/max mappings, read by the adapter's
    ``output_range``). When both ends are known the range is not a statistic: no outlier removal
    (``z_threshold``) and no error-method search may cut it (a softmax's top probabilities are its
    rare largest values, which both would clip). The grid then spans the known range, as MCT's bounded
    outputs: threshold max(|min|, |max|) (a power of two: rounded up; the top grid value is one step
    below it, so 1.0 reads 255/256 at 8 bits), UNIFORM [min, max]; Signedness.AUTO gives a signed grid
    when min < 0. A range with an unknown end (ReLU's (0, None)) changes nothing. Raises ValueError on
    empty statistics.
    """
    method, n_bits, error_method, min_threshold, l_p_value = _check_common(
        method, n_bits, error_method, min_threshold, l_p_value)
    signedness = _as_enum(signedness, Signedness, "signedness")
    if not isinstance(stats, TensorStatistics):
        raise TypeError(f"stats must be a TensorStatistics, got {type(stats).__name__}")
    if stats.count == 0:
        raise ValueError("no activation statistics were collected (the tensor was never seen)")
    if not (isinstance(z_threshold, (int, float, np.floating)) and z_threshold > 0):
        raise ValueError(f"z_threshold must be > 0 (inf disables outlier removal), got {z_threshold!r}")
    bounds = _known_range(output_range)
    if bounds is not None:  # the operator's range: no statistic narrows it
        lo, hi = bounds
        edges, counts = stats.histogram()
    elif math.isinf(z_threshold):
        lo, hi = stats.min, stats.max
        edges, counts = stats.histogram()
    else:
        lo, hi = stats.z_score_range(z_threshold)
        edges, counts = stats.histogram_within(lo, hi)
    signed = (lo if bounds is not None else stats.min) < 0 if signedness == Signedness.AUTO \
        else signedness == Signedness.SIGNED
    keep = counts > 0
    # bin centres stand for the values; the exact extremes bound them (a constant tensor is exact)
    c = np.clip(0.5 * (edges[:-1] + edges[1:]), lo, hi)[keep][None, :]
    h = counts[keep].astype(np.float64)[None, :]
    if c.size == 0:  # nothing left in the kept window: score on the range ends (errors are 0 anyway)
        c, h = np.array([[lo, hi]], np.float64), np.zeros((1, 2))
    amax = np.array([max(abs(lo), abs(hi)) if signed else max(hi, 0.0)])

    if method.is_lut:
        t = _lut_threshold(method, amax, min_threshold)
        ints = quantize(c[0], symmetric_grid(float(t[0]), lut_values_bitwidth, signed))
        table = _lut_table(ints, h[0], n_bits, lut_values_bitwidth, signed)
        out = _lut_result(table, float(t[0]), lut_values_bitwidth)
        out[SIGNED] = bool(signed)
        return out

    lo0 = np.array([0.0 if signedness == Signedness.UNSIGNED else min(lo, 0.0)])
    hi0 = np.array([max(hi, 0.0)])
    if bounds is not None:
        return _bounded_output_params(method, n_bits, signed, float(lo0[0]), float(hi0[0]), min_threshold)
    scorer = _histogram_scorer(error_method, l_p_value, c, h, value_map)
    out = _finish(_select(method, n_bits, error_method, scorer, lo0, hi0, signed, min_threshold, _ACT),
                  n_bits, per_channel=False)
    if pot_clip_tolerance > 0 and method == QuantizationMethod.POWER_OF_TWO \
            and error_method == QuantizationErrorMethod.NOCLIPPING:
        lower = out[THRESHOLD] / 2
        top = lower * (1 - 2.0 ** -(n_bits - 1 if signed else n_bits))  # the grid's largest value
        if lower >= min_threshold and top >= (1 - pot_clip_tolerance) * float(amax[0]):
            out[THRESHOLD] = lower
    if method != QuantizationMethod.UNIFORM:
        out[SIGNED] = bool(signed)
    return out


def _known_range(output_range) -> Optional[Tuple[float, float]]:
    """(min, max) of an operator's output range when both ends are known and finite, else None."""
    if output_range is None:
        return None
    if not (isinstance(output_range, (tuple, list)) and len(output_range) == 2):
        raise ValueError(f"output_range must be a (min, max) pair, got {output_range!r}")
    lo, hi = output_range
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    if lo > hi:
        raise ValueError(f"output_range {output_range!r}: min must be <= max")
    return float(lo), float(hi)


def _bounded_output_params(method, n_bits: int, signed: bool, lo: float, hi: float, min_threshold: float) -> dict:
    """The grid of an output whose operator bounds it to [lo, hi] (lo <= 0 <= hi): it spans the range."""
    if method == QuantizationMethod.UNIFORM:
        return _finish({RANGE_MIN: np.array([lo]), RANGE_MAX: np.array([hi])}, n_bits, per_channel=False)
    t = max(abs(lo) if signed else 0.0, hi, min_threshold)
    if method == QuantizationMethod.POWER_OF_TWO:
        t = float(power_of_two_threshold(np.array([t]), min_threshold)[0])
    return {THRESHOLD: float(t), SIGNED: bool(signed)}


def _histogram_scorer(error_method, l_p_value, c: np.ndarray, h: Optional[np.ndarray], value_map=None):
    """maker -> score(params) over (R, B) centres / counts (None: the values themselves, unweighted)."""
    def scorer(make):
        if error_method == QuantizationErrorMethod.KL:
            return lambda params: _kl_errors(c, h, params, make)
        p = {QuantizationErrorMethod.MSE: 2, QuantizationErrorMethod.MAE: 1}.get(error_method, l_p_value)
        return lambda params: _lp_errors(c, h, params, make, p, value_map)
    return scorer


# ------------------------------------------------------------------------------------------- weights
def weights_quantization_params(method, n_bits: int, error_method, weights, channel_axis: Optional[int],
                                per_channel: bool, min_threshold: float = MIN_THRESHOLD, l_p_value: int = 2,
                                lut_values_bitwidth: int = LUT_VALUES_BITWIDTH) -> dict:
    """Quantization params of a weight tensor (always signed), per tensor or per channel.

    Returns POWER_OF_TWO / SYMMETRIC: ``{THRESHOLD}``; UNIFORM: ``{RANGE_MIN, RANGE_MAX}`` (each
    range contains zero, zero on the grid); LUT_POT_QUANTIZER / LUT_SYM_QUANTIZER:
    ``{LUT_VALUES, THRESHOLD}``: one table of at most ``2**n_bits`` distinct integers in the signed
    ``lut_values_bitwidth``-bit range, shared by all channels (weighted k-means of the weights
    quantized onto that range, MCT semantics), and the no-clipping threshold (max|w|, rounded up to
    a power of two for LUT_POT). Values are python floats per tensor, 1-D float64 arrays over the
    channels (the ``channel_axis`` dimension) per channel.

    Errors are computed on the weights themselves (all channels x candidates at once); KL uses a
    histogram of each channel. HMSE falls back to MSE (no Hessian scores here).
    """
    method, n_bits, error_method, min_threshold, l_p_value = _check_common(
        method, n_bits, error_method, min_threshold, l_p_value)
    w = as_float_array(weights, "weights")
    if w.size == 0:
        raise ValueError(f"weights are empty (shape {w.shape})")
    per_channel = bool(per_channel)
    if per_channel:
        if channel_axis is None or isinstance(channel_axis, bool) or not isinstance(channel_axis, (int, np.integer)):
            raise ValueError(f"per-channel quantization needs an int channel_axis, got {channel_axis!r}")
        if w.ndim == 0 or not -w.ndim <= channel_axis < w.ndim:
            raise ValueError(f"channel_axis {channel_axis} is out of range for weights of shape {w.shape}")
        x = np.ascontiguousarray(np.moveaxis(w, channel_axis, 0).reshape(w.shape[channel_axis], -1))
    else:
        x = w.reshape(1, -1)
    lo, hi = x.min(axis=1).astype(np.float64), x.max(axis=1).astype(np.float64)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise ValueError("weights contain NaN or inf values")
    amax = np.maximum(np.abs(lo), np.abs(hi))

    if method.is_lut:
        t = _lut_threshold(method, amax, min_threshold)
        ints = quantize(x, symmetric_grid(t if per_channel else float(t[0]), lut_values_bitwidth, True,
                                          axis=0 if per_channel else None))
        table = _lut_table(ints, np.ones(ints.size), n_bits, lut_values_bitwidth, True)
        return _lut_result(table, t.copy() if per_channel else float(t[0]), lut_values_bitwidth)

    if error_method == QuantizationErrorMethod.KL:
        n_hist = int(np.clip(x.shape[1] // 4, *_WEIGHT_KL_BINS))
        scorer = _histogram_scorer(error_method, l_p_value, *_row_histograms(x, n_hist))
    else:
        scorer = _histogram_scorer(error_method, l_p_value, x, None)
    result = _select(method, n_bits, error_method, scorer, np.minimum(lo, 0.0), np.maximum(hi, 0.0),
                     True, min_threshold, _WEIGHTS if x.shape[1] <= FEW_WEIGHTS_PER_CHANNEL else _WEIGHTS_MANY)
    return _finish(result, n_bits, per_channel)
