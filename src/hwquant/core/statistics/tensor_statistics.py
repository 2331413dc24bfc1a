"""Streaming statistics of an activation tensor, collected batch by batch in bounded memory.

:class:`TensorStatistics` keeps, over everything passed to :meth:`TensorStatistics.update`:

- the exact global min / max, count, mean and (population) standard deviation; the mean and the
  spread are accumulated in float64 with Chan's parallel formula (per chunk: mean, then the sum of
  squared deviations), so a large mean does not eat the variance;
- optionally per-channel min / max / mean (over every axis but ``channel_axis``), as needed by bias
  correction, shift-negative correction and channel equalization;
- a histogram with a fixed number of bins whose range grows with the data. Bins have width ``w``
  and edges at integer multiples of ``w`` (``edge_g = g * w``); when a batch falls outside the
  window, the window slides and, if the data no longer fits, adjacent bins are merged ``2**k`` at a
  time (``w -> w * 2**k``). The new edges are a subset of the old ones, so the counts stay exact
  and no sample is ever kept. To keep calibration fast on big activations, each batch adds at most
  ``max_hist_samples_per_batch`` values to the histogram: a uniform random subsample (with
  replacement) drawn from a generator seeded with (seed, the batch's index). Each batch's draw depends
  on nothing else, so batches summarised in other processes (core/pipeline/distributed.py) and added in their
  order give the same statistics, bit for bit. Min / max / mean / std stay exact on the full tensor.

A value lands in bin ``g`` exactly when ``g * w <= x < (g + 1) * w`` (checked against the float
edges themselves), so :meth:`histogram` agrees with ``np.histogram`` on the same edges.

Framework-free: numpy only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from hwquant.core.numerics.arrays import as_float_array

__all__ = ["TensorStatistics", "BatchSummary", "summarize"]

_CHUNK = 1 << 18  # elements per float64 chunk of the mean / variance pass (2 MiB)
_WIDE = 2048  # columns a row-wise numpy reduction needs to vectorise well
_MIN_REL_WIDTH = 2.0 ** -40  # bins no narrower than this times max|x| (keeps |x| / w far from int64 limits)


def _exact_bins(x: np.ndarray, w: float) -> np.ndarray:
    """Global bin index of every value: the largest integer g with ``g * w <= x`` (int64)."""
    xf = np.asarray(x, dtype=np.float64)
    g = np.floor(xf / w)  # (integers held in float64 are exact far beyond any bin index used)
    # the division may be one ulp off: correct against the float edges themselves
    g -= xf < g * w
    g += xf >= (g + 1) * w
    return g.astype(np.int64)


def _bin_of(v: float, w: float) -> int:
    return int(_exact_bins(np.array([v]), w)[0])


# Values of this magnitude are not data but markers (attention masks add torch.finfo(float32).min or
# -inf before a softmax): no activation grid can hold both them and the data they mask.
MASK_SENTINEL = 1e30


class TensorStatistics:
    """Running statistics of a tensor seen batch by batch (see the module docstring).

    Args:
        channel_axis: axis of the channels in each batch (negative counts from the end); needed
            when ``per_channel`` is set.
        n_bins: number of histogram bins (>= 2).
        per_channel: also collect per-channel min / max / mean.
        max_hist_samples_per_batch: at most this many values of a batch go into the histogram.
        seed: seed of the subsampling (an int; None: a random one; a numpy Generator: one drawn from it).
    """

    def __init__(self, channel_axis: Optional[int] = 1, n_bins: int = 2048, per_channel: bool = False,
                 max_hist_samples_per_batch: int = 1 << 17, seed=0):
        if not (isinstance(n_bins, (int, np.integer)) and n_bins >= 2):
            raise ValueError(f"n_bins must be an int >= 2, got {n_bins!r}")
        if not (isinstance(max_hist_samples_per_batch, (int, np.integer)) and max_hist_samples_per_batch >= 1):
            raise ValueError(f"max_hist_samples_per_batch must be an int >= 1, got {max_hist_samples_per_batch!r}")
        if channel_axis is not None and not isinstance(channel_axis, (int, np.integer)):
            raise ValueError(f"channel_axis must be None or an int, got {channel_axis!r}")
        if per_channel and channel_axis is None:
            raise ValueError("per_channel statistics need a channel_axis, got None")
        self.channel_axis = None if channel_axis is None else int(channel_axis)
        self.n_bins = int(n_bins)
        self.per_channel = bool(per_channel)
        self.max_hist_samples_per_batch = int(max_hist_samples_per_batch)
        if isinstance(seed, np.random.Generator):
            seed = int(seed.integers(2 ** 63))
        elif seed is None:
            seed = int(np.random.default_rng().integers(2 ** 63))
        self.seed = int(seed)
        self.batches = 0  # batches added so far: the index the next batch's subsample is drawn with
        self.has_sentinels = False  # a batch held masking sentinels (see add)
        self._count = 0
        self._mean = 0.0
        self._m2 = 0.0  # sum of squared deviations from the mean
        self._min = math.inf
        self._max = -math.inf
        # histogram: counts[i] holds [ origin + (start + i) * w, origin + (start + i + 1) * w ); the
        # window arithmetic works on x - origin (origin is 0 unless the statistics were `shifted`)
        self._origin = 0.0
        self._w = 0.0
        self._start = 0
        self._counts: Optional[np.ndarray] = None
        # per channel
        self._ch_min: Optional[np.ndarray] = None
        self._ch_max: Optional[np.ndarray] = None
        self._ch_sum: Optional[np.ndarray] = None
        self._ch_count = 0  # elements per channel

    # ------------------------------------------------------------------------------------------- update
    def update(self, x) -> "TensorStatistics":
        """Add one batch (array-like, batch first). NaN or inf raise ValueError. Returns self."""
        return self.add(summarize(x, self))

    def add(self, batch: "BatchSummary") -> "TensorStatistics":
        """Add one batch given as its summary (what `summarize`, or a framework's own faster
        summariser, computes). NaN raises ValueError, leaving the statistics unchanged. A batch
        holding masking sentinels (infinities, or magnitudes from MASK_SENTINEL up, such as the
        float32 minimum that attention masks add) is not added: `has_sentinels` is set instead."""
        lo, hi = batch.min, batch.max
        if not (math.isnan(lo) or math.isnan(hi)) and max(abs(lo), abs(hi)) >= MASK_SENTINEL:
            self.has_sentinels, self.batches = True, self.batches + 1
            return self
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError("the activation contains NaN or inf values "
                             f"(batch of shape {batch.shape}, min={lo}, max={hi})")
        self.batches += 1
        if batch.count == 0:
            return self
        if self.per_channel:
            if batch.channel_min is None:
                raise ValueError("per-channel statistics need per-channel batch summaries")
            self._add_channels(batch.channel_min, batch.channel_max, batch.channel_sum,
                               batch.count // batch.channel_min.shape[0],
                               f"the batch has {{}} channels along axis {self.channel_axis}, earlier batches had {{}}")
        self._combine(batch.count, batch.mean, batch.m2)
        o = self._origin
        self._update_histogram(np.asarray(batch.sample) - o if o else np.asarray(batch.sample), lo - o, hi - o)
        self._min, self._max = min(self._min, lo), max(self._max, hi)
        return self

    def _add_channels(self, ch_min: Any, ch_max: Any, ch_sum: Any, per_channel_count: int, mismatch: str) -> None:
        """Fold in the per-channel min / max / sum of more data (the first data set them) and its count per
        channel; `mismatch` is the error for another number of channels, formatted with theirs and ours."""
        if self._ch_min is None:
            self._ch_min, self._ch_max, self._ch_sum = (np.asarray(a, np.float64).copy() for a in (ch_min, ch_max, ch_sum))
        else:
            # the three per-channel arrays are set together (here and in every per-channel summary)
            assert self._ch_max is not None and self._ch_sum is not None
            if ch_min.shape != self._ch_min.shape:
                raise ValueError(mismatch.format(ch_min.shape[0], self._ch_min.shape[0]))
            np.minimum(self._ch_min, ch_min, out=self._ch_min)
            np.maximum(self._ch_max, ch_max, out=self._ch_max)
            self._ch_sum += ch_sum
        self._ch_count += per_channel_count

    def _combine(self, n: int, mean: float, m2: float) -> None:
        total = self._count + n
        delta = mean - self._mean
        self._mean += delta * n / total
        self._m2 += m2 + delta * delta * self._count * n / total
        self._count = total

    def sample_indices(self, size: int, batch_index: Optional[int] = None) -> Optional[np.ndarray]:
        """Indices of the values of a `size`-value batch that go into the histogram (None: all), drawn
        for the batch ``batch_index`` (default: the next one, ``self.batches``)."""
        if size <= self.max_hist_samples_per_batch:
            return None
        index = self.batches if batch_index is None else batch_index
        return np.random.default_rng([self.seed, index]).integers(0, size, self.max_hist_samples_per_batch)

    def _update_histogram(self, flat: np.ndarray, lo: float, hi: float) -> None:
        self._cover(lo, hi)
        g = _exact_bins(flat, self._w) - self._start
        assert self._counts is not None  # _cover made the histogram
        self._counts += np.bincount(g, minlength=self.n_bins)

    # ------------------------------------------------------------------------------------------ histogram
    def _initial_width(self, lo: float, hi: float) -> float:
        floor = max(abs(lo), abs(hi)) * _MIN_REL_WIDTH
        if hi > lo:
            return max((hi - lo) / (self.n_bins - 1), floor, 1e-300)
        return max(floor, max(abs(lo), 1.0) * 2.0 ** -20)  # a single value so far: any small width

    def _reset(self, lo: float, hi: float) -> None:
        """Start a fresh histogram sized for [lo, hi], keeping the counts of a single-valued past."""
        old_total = 0 if self._counts is None else int(self._counts.sum())
        self._w = self._initial_width(lo, hi)
        self._counts = np.zeros(self.n_bins, np.int64)
        g_lo, g_hi = _bin_of(lo, self._w), _bin_of(hi, self._w)
        self._start = g_lo - max(self.n_bins - 1 - (g_hi - g_lo), 0) // 2
        self._fit(lo, hi)  # float fuzz: widen if [lo, hi] still does not fit
        if old_total:  # every earlier value equals self._min
            self._counts[_bin_of(self._min - self._origin, self._w) - self._start] += old_total

    def _cover(self, lo: float, hi: float) -> None:
        """Make the window hold [lo, hi] and all data so far."""
        h_min, h_max = self._min - self._origin, self._max - self._origin
        if self._counts is None or (self._min == self._max and (lo < h_min or hi > h_max)):
            self._reset(min(lo, h_min), max(hi, h_max))
        else:
            self._fit(lo, hi)

    def _fit(self, lo: float, hi: float, min_k: int = 0) -> None:
        """Slide the window over [lo, hi] and the data so far, merging bins ``2**k`` at a time
        (k >= min_k, the smallest that fits) when it is too narrow. Counts stay exact."""
        lo, hi = min(lo, self._min - self._origin), max(hi, self._max - self._origin)
        w, n = self._w, self.n_bins
        g_lo, g_hi = _bin_of(lo, w), _bin_of(hi, w)
        if min_k == 0 and self._start <= g_lo and g_hi < self._start + n:
            return
        k = min_k
        while (g_hi >> k) - (g_lo >> k) + 1 > n:
            k += 1
        lo_k, hi_k = g_lo >> k, g_hi >> k
        start = lo_k - (n - 1 - (hi_k - lo_k)) // 2
        old = (np.arange(self._start, self._start + n, dtype=np.int64) >> k) - start
        assert self._counts is not None  # only an existing histogram is refitted
        keep = self._counts > 0  # (empty bins may fall outside the new window)
        counts = np.bincount(old[keep], weights=self._counts[keep], minlength=n)
        self._counts, self._start, self._w = np.rint(counts).astype(np.int64), start, w * 2.0 ** k

    def _check_data(self) -> None:
        if self._count == 0:
            raise ValueError("no statistics were collected yet (update() was never called with data)")

    def histogram(self) -> Tuple[np.ndarray, np.ndarray]:
        """(bin_edges float64 of length n_bins + 1, counts int64 of length n_bins), copies."""
        self._check_data()
        edges = np.arange(self._start, self._start + self.n_bins + 1, dtype=np.float64) * self._w
        assert self._counts is not None  # data was added, so the histogram exists
        return edges + self._origin, self._counts.copy()

    @property
    def bin_width(self) -> float:
        self._check_data()
        return self._w

    def z_score_range(self, z_threshold: float) -> Tuple[float, float]:
        """(lo, hi): the values within ``z_threshold`` standard deviations of the mean, intersected
        with [min, max]; ``inf`` (or a zero spread) gives the full range [min, max]."""
        self._check_data()
        if not z_threshold > 0:
            raise ValueError(f"z_threshold must be > 0, got {z_threshold!r}")
        if math.isinf(z_threshold) or self.std == 0:
            return self._min, self._max
        m, d = self.mean, z_threshold * self.std
        lo, hi = max(self._min, m - d), min(self._max, m + d)
        return (lo, hi) if lo <= hi else (m, m)

    def histogram_within(self, lo: float, hi: float) -> Tuple[np.ndarray, np.ndarray]:
        """The histogram restricted to the bins whose centre lies in [lo, hi] (outlier removal):
        (edges, counts) of the kept contiguous bins. If no centre is inside, the bin holding
        (lo + hi) / 2 is kept, so the result is never empty."""
        edges, counts = self.histogram()
        centres = 0.5 * (edges[:-1] + edges[1:])
        i0, i1 = int(np.searchsorted(centres, lo, "left")), int(np.searchsorted(centres, hi, "right"))
        if i1 <= i0:
            i0 = int(np.clip(np.searchsorted(edges, 0.5 * (lo + hi), "right") - 1, 0, self.n_bins - 1))
            i1 = i0 + 1
        return edges[i0:i1 + 1].copy(), counts[i0:i1].copy()

    # ------------------------------------------------------------------------------------------ properties
    @property
    def count(self) -> int:
        """Number of values seen (all of them, not the histogram's subsample)."""
        return self._count

    @property
    def min(self) -> float:
        self._check_data()
        return self._min

    @property
    def max(self) -> float:
        self._check_data()
        return self._max

    @property
    def mean(self) -> float:
        self._check_data()
        return self._mean

    @property
    def var(self) -> float:
        self._check_data()
        return max(self._m2 / self._count, 0.0)

    @property
    def std(self) -> float:
        """Population standard deviation (ddof=0, as np.std)."""
        return math.sqrt(self.var)

    def _channel(self, arr):
        if not self.per_channel:
            raise ValueError("per-channel statistics were not collected (per_channel=False)")
        self._check_data()
        return arr.copy()

    @property
    def channel_min(self) -> np.ndarray:
        return self._channel(self._ch_min)

    @property
    def channel_max(self) -> np.ndarray:
        return self._channel(self._ch_max)

    @property
    def channel_mean(self) -> np.ndarray:
        return self._channel(self._ch_sum) / self._ch_count

    # ------------------------------------------------------------------------------------------ merge
    def merge(self, other: "TensorStatistics") -> "TensorStatistics":
        """Add the statistics of ``other`` (same per-channel layout) to self; returns self.

        Exact for min / max / mean / std / per-channel values. The histogram is exact when the two
        bin widths differ by a power of two (both grew from the same first batch range, e.g.); else
        each bin of the finer-or-equal other histogram is moved whole to the bin holding its centre."""
        if not isinstance(other, TensorStatistics):
            raise TypeError(f"can only merge another TensorStatistics, got {type(other).__name__}")
        if other.per_channel != self.per_channel:
            raise ValueError("cannot merge statistics with and without per-channel data")
        if other.n_bins != self.n_bins:
            raise ValueError(f"cannot merge histograms of {other.n_bins} and {self.n_bins} bins")
        self.has_sentinels = self.has_sentinels or other.has_sentinels
        if other._count == 0:
            return self
        if self._count == 0:
            self._copy_from(other)
            return self
        if self.per_channel:  # (both hold data: their per-channel arrays are set)
            self._add_channels(other._ch_min, other._ch_max, other._ch_sum, other._ch_count,
                               "cannot merge statistics of {} and {} channels")
        o_edges, o_counts = other.histogram()
        lo, hi = min(other._min, self._min), max(other._max, self._max)
        o = self._origin
        if self._min == self._max:  # a single value so far: size the window for the union now
            self._cover(lo - o, hi - o)
        min_k = 0
        if other._w > self._w:  # coarsen self to at least the other's width
            min_k = max(int(math.ceil(math.log2(other._w / self._w) - 1e-9)), 0)
        self._fit(lo - o, hi - o, min_k)
        nz = o_counts > 0
        centres = 0.5 * (o_edges[:-1] + o_edges[1:])[nz]
        g = np.clip(_exact_bins(np.clip(centres, lo, hi) - o, self._w) - self._start, 0, self.n_bins - 1)
        assert self._counts is not None  # self holds data, so its histogram exists
        self._counts += np.bincount(g, weights=o_counts[nz], minlength=self.n_bins).astype(np.int64)
        self._combine(other._count, other._mean, other._m2)
        self._min, self._max = lo, hi
        self.batches += other.batches
        return self

    def histogram_counts(self) -> Optional[np.ndarray]:
        """The histogram's counts as they stand (None before any data): see `sum_histogram_counts`."""
        return None if self._counts is None else self._counts.copy()

    def sum_histogram_counts(self, counts: Sequence[Optional[np.ndarray]]) -> "TensorStatistics":
        """Set the counts to the sum of ``counts``: those of statistics in other processes that added the
        same batch summaries in the same order, each with the samples of its own batches only (the others'
        with empty samples). The window and the bin width follow the batches' extremes alone, and adding,
        merging and re-centring bins are linear in the counts, so the sum is what one process adding every
        sample counts, exactly (core/pipeline/distributed.py). Returns self."""
        present = [c for c in counts if c is not None]
        if present:
            if self._counts is None or any(c.shape != self._counts.shape for c in present):
                raise ValueError("the processes' histograms differ in shape: they did not add the same summaries")
            self._counts = np.asarray(np.sum(present, axis=0), dtype=np.int64)
        return self

    def shifted(self, c: float) -> "TensorStatistics":
        """The statistics of ``x + c``: a copy with every figure moved by c (the spread unchanged);
        exact, histogram included (its edges move with it). Shift-negative correction uses it for
        the tensors it shifts instead of running the model again."""
        out = TensorStatistics(self.channel_axis, self.n_bins, self.per_channel, self.max_hist_samples_per_batch,
                               seed=self.seed)
        out._copy_from(self)
        if self._count:
            out._min, out._max, out._mean, out._origin = self._min + c, self._max + c, self._mean + c, self._origin + c
            if self.per_channel:
                # self holds data: its per-channel arrays are set
                assert self._ch_min is not None and self._ch_max is not None and self._ch_sum is not None
                out._ch_min, out._ch_max = self._ch_min + c, self._ch_max + c
                out._ch_sum = self._ch_sum + c * self._ch_count
        return out

    def add_constant(self, value: float, count: int) -> "TensorStatistics":
        """Add ``count`` copies of ``value``, spread evenly over the channels (the border a constant
        padding adds), as one batch; returns self."""
        channels = self._ch_min.shape[0] if self.per_channel and self._ch_min is not None else 1
        if count <= 0:
            return self
        if count % channels:
            raise ValueError(f"{count} values do not spread evenly over {channels} channels")
        sample = np.full(min(count, self.max_hist_samples_per_batch), value, np.float64)
        summary = BatchSummary(count, value, value, value, 0.0, sample)
        if self.per_channel:
            summary.channel_min = summary.channel_max = np.full(channels, value, np.float64)
            summary.channel_sum = np.full(channels, value * (count // channels), np.float64)
        return self.add(summary)

    def _copy_from(self, other: "TensorStatistics") -> None:
        for name in ("_count", "_mean", "_m2", "_min", "_max", "_origin", "_w", "_start", "_ch_count", "has_sentinels",
                     "batches"):
            setattr(self, name, getattr(other, name))
        for name in ("_counts", "_ch_min", "_ch_max", "_ch_sum"):
            v = getattr(other, name)
            setattr(self, name, None if v is None else v.copy())

    def __repr__(self) -> str:
        if self._count == 0:
            return "TensorStatistics(empty)"
        return (f"TensorStatistics(count={self._count}, min={self._min:.6g}, max={self._max:.6g}, "
                f"mean={self.mean:.6g}, std={self.std:.6g}, n_bins={self.n_bins}, bin_width={self._w:.3g})")


@dataclass
class BatchSummary:
    """What the statistics keep of one batch: exact extremes and moments, per-channel figures
    (when collected), and the values that go into the histogram."""

    count: int
    min: float
    max: float
    mean: float
    m2: float  # sum of squared deviations from the batch mean
    sample: np.ndarray
    channel_min: Optional[np.ndarray] = None
    channel_max: Optional[np.ndarray] = None
    channel_sum: Optional[np.ndarray] = None
    shape: tuple = ()


def _column_reduce(rows: np.ndarray, reduce) -> np.ndarray:
    """reduce (np.minimum.reduce, np.add.reduce ...) down the columns of a (values, channels) matrix.
    Numpy vectorises a reduction over rows across the columns, badly when they are few (96 channels:
    ~1 GB/s), so k rows are laid side by side first (at least _WIDE columns) and the k partial results
    reduced after: 3-4x faster, the same values for min / max."""
    m, c = rows.shape
    k = -(-_WIDE // c)
    whole = (m // k) * k
    if k == 1 or whole == 0:
        return reduce(rows, axis=0)
    out = reduce(reduce(rows[:whole].reshape(whole // k, k * c), axis=0).reshape(k, c), axis=0)
    return reduce(np.stack([out, reduce(rows[whole:], axis=0)]), axis=0) if whole < m else out


def summarize(x, stats: TensorStatistics, precise: bool = True, rows_of: Optional[tuple] = None) -> BatchSummary:
    """The numpy summary of a batch for `stats` (its channel axis, per-channel flag, subsampling).
    ``rows_of=(first, n)``: ``x`` is the samples ``first, first + 1, ...`` of an ``n``-sample batch run in
    chunks: its histogram sample is its share of the whole batch's (``merge_chunks`` adds the chunks up), so
    the statistics do not depend on the chunk size.
    Per-channel extremes come from a (values, channels) matrix (a free view of channels-last
    activations). precise: the mean and spread in float64 around the mean (exact to ~1e-13, also for
    a large offset); otherwise from float32 sums and the sum of squares, as the torch summariser
    computes them (~3x faster, ~1e-4 relative on the spread: ample for z-scores)."""
    x = as_float_array(x, "an activation")
    if x.size == 0:
        return BatchSummary(0, math.inf, -math.inf, 0.0, 0.0, np.zeros(0, np.float32), shape=x.shape)
    flat = np.ascontiguousarray(x).reshape(-1)
    rows = None
    if stats.per_channel:
        if x.ndim == 0 or not -x.ndim <= stats.channel_axis < x.ndim:
            raise ValueError(f"channel_axis {stats.channel_axis} is out of range for an activation of "
                             f"shape {x.shape}")
        ax = stats.channel_axis % x.ndim
        rows = (flat if ax == x.ndim - 1 else np.moveaxis(x, ax, -1)).reshape(-1, x.shape[ax])
        ch_min, ch_max = _column_reduce(rows, np.minimum.reduce), _column_reduce(rows, np.maximum.reduce)
        lo, hi = float(ch_min.min()), float(ch_max.max())
    else:
        lo, hi = float(flat.min()), float(flat.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):  # report before the moments overflow
        return BatchSummary(x.size, lo, hi, 0.0, 0.0, np.zeros(0, np.float32), shape=x.shape)
    if precise:
        ch_sum = None if rows is None else np.add.reduce(rows, axis=0, dtype=np.float64)
        mean = float(np.add.reduce(flat, dtype=np.float64)) / flat.size
        m2 = 0.0
        for i in range(0, flat.size, _CHUNK):  # float64 chunks keep memory bounded
            c = flat[i:i + _CHUNK].astype(np.float64) - mean
            m2 += float(np.einsum("i,i->", c, c))  # (BLAS dot is slow under thread contention)
    else:
        ch_sum = None if rows is None else _column_reduce(rows, np.add.reduce).astype(np.float64)
        total = float(ch_sum.sum()) if ch_sum is not None else float(np.add.reduce(flat, dtype=np.float32))
        mean = total / flat.size
        m2 = max(float(np.dot(flat, flat)) - flat.size * mean * mean, 0.0)
    if rows_of is None or x.ndim == 0:
        idx = stats.sample_indices(flat.size)
    else:  # the batch's draw, restricted to this chunk's values (batch first: a contiguous range)
        per_row = flat.size // max(len(x), 1)
        idx = stats.sample_indices(per_row * rows_of[1])
        if idx is not None:
            offset = per_row * rows_of[0]
            idx = idx[(idx >= offset) & (idx < offset + flat.size)] - offset
    sample = flat if idx is None else flat[idx]
    summary = BatchSummary(flat.size, lo, hi, mean, m2, sample, shape=x.shape)
    if rows is not None:
        summary.channel_min, summary.channel_max, summary.channel_sum = ch_min, ch_max, ch_sum
    return summary


def merge_chunks(chunks: List[BatchSummary]) -> BatchSummary:
    """One batch's summary from the summaries of its chunks (``summarize(..., rows_of=...)``, in order)."""
    if len(chunks) == 1:
        return chunks[0]
    count = sum(c.count for c in chunks)
    mean = sum(c.mean * c.count for c in chunks) / max(count, 1)
    m2 = sum(c.m2 + c.count * (c.mean - mean) ** 2 for c in chunks)
    merged = BatchSummary(count, min(c.min for c in chunks), max(c.max for c in chunks), mean, m2,
                          np.concatenate([c.sample for c in chunks]),
                          shape=(sum(c.shape[0] for c in chunks),) + tuple(chunks[0].shape[1:]))
    if chunks[0].channel_min is not None:
        merged.channel_min = np.minimum.reduce(np.stack([np.asarray(c.channel_min) for c in chunks]))
        merged.channel_max = np.maximum.reduce(np.stack([np.asarray(c.channel_max) for c in chunks]))
        merged.channel_sum = np.add.reduce(np.stack([np.asarray(c.channel_sum) for c in chunks]))
    return merged
