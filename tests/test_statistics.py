"""Tests of hwquant.core.statistics.tensor_statistics: streaming activation statistics in bounded memory."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwquant.core.statistics.tensor_statistics import TensorStatistics

NO_SUBSAMPLING = 1 << 40


def growing_batches(seed=0, n=25, shape=(4, 3, 5, 5)):
    """Batches whose range grows (and drifts) from one to the next, as float32."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * (1 + 3 * i) + 0.7 * i - 4).astype(np.float32) for i in range(n)]


def test_moments_and_extremes_are_exact_across_batches():
    batches = growing_batches()
    s = TensorStatistics(max_hist_samples_per_batch=NO_SUBSAMPLING)
    for b in batches:
        s.update(b)
    all_data = np.concatenate([b.ravel() for b in batches])
    assert s.count == all_data.size
    assert s.min == float(all_data.min()) and s.max == float(all_data.max())
    ref = all_data.astype(np.float64)
    assert s.mean == pytest.approx(ref.mean(), rel=1e-12, abs=1e-12)
    assert s.std == pytest.approx(ref.std(), rel=1e-12)


def test_mean_and_std_keep_precision_with_a_large_offset():
    rng = np.random.default_rng(1)
    batches = [(1e4 + rng.standard_normal(5000)).astype(np.float32) for _ in range(8)]
    s = TensorStatistics()
    for b in batches:
        s.update(b)
    ref = np.concatenate(batches).astype(np.float64)
    assert s.mean == pytest.approx(ref.mean(), rel=1e-13)
    assert s.std == pytest.approx(ref.std(), rel=1e-9)


def test_histogram_matches_numpy_on_its_edges_without_subsampling():
    batches = growing_batches(seed=3)
    s = TensorStatistics(n_bins=512, max_hist_samples_per_batch=NO_SUBSAMPLING)
    for b in batches:
        s.update(b)
        edges, counts = s.histogram()
        assert edges.shape == (513,) and counts.shape == (512,)  # bounded: always n_bins
    all_data = np.concatenate([b.ravel() for b in batches])
    edges, counts = s.histogram()
    assert counts.sum() == all_data.size
    assert edges[0] <= all_data.min() and all_data.max() < edges[-1]
    np.testing.assert_array_equal(counts, np.histogram(all_data, edges)[0])
    # the widths are uniform and the window is not wider than needed by more than ~2x
    assert np.allclose(np.diff(edges), s.bin_width)
    assert s.bin_width * 512 <= 4 * (all_data.max() - all_data.min())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.floats(1e-3, 1e3), st.integers(1, 200)), min_size=1, max_size=8),
       st.integers(2, 64))
def test_histogram_is_exact_for_any_sequence_of_ranges(batch_specs, n_bins):
    rng = np.random.default_rng(0)
    s = TensorStatistics(n_bins=n_bins, max_hist_samples_per_batch=NO_SUBSAMPLING)
    data = []
    for centre, scale, size in batch_specs:
        b = (centre + scale * rng.standard_normal(size)).astype(np.float32)
        data.append(b)
        s.update(b)
    all_data = np.concatenate(data)
    edges, counts = s.histogram()
    assert counts.sum() == all_data.size
    np.testing.assert_array_equal(counts, np.histogram(all_data, edges)[0])
    assert s.min == all_data.min() and s.max == all_data.max()


def test_histogram_subsamples_big_batches_but_extremes_stay_exact():
    rng = np.random.default_rng(2)
    s = TensorStatistics(max_hist_samples_per_batch=1000)
    batches = [rng.standard_normal((10, 500)).astype(np.float32) for _ in range(5)]
    batches[3][7, 123] = 50.0  # an outlier the subsample most likely misses
    for b in batches:
        s.update(b)
    edges, counts = s.histogram()
    assert counts.sum() == 5 * 1000
    assert s.count == 5 * 5000
    assert s.max == 50.0 and edges[-1] > 50.0
    all_data = np.concatenate([b.ravel() for b in batches]).astype(np.float64)
    assert s.mean == pytest.approx(all_data.mean(), rel=1e-12)


def test_subsampling_is_seeded():
    x = np.random.default_rng(0).standard_normal(10000).astype(np.float32)
    a, b = (TensorStatistics(max_hist_samples_per_batch=100, seed=7).update(x) for _ in range(2))
    np.testing.assert_array_equal(a.histogram()[1], b.histogram()[1])


def test_constant_batches_then_a_spread():
    s = TensorStatistics(n_bins=64, max_hist_samples_per_batch=NO_SUBSAMPLING)
    s.update(np.zeros((2, 3), np.float32))
    s.update(np.zeros((2, 3), np.float32))
    assert (s.min, s.max, s.mean, s.std) == (0.0, 0.0, 0.0, 0.0)
    edges, counts = s.histogram()
    assert counts.sum() == 12 and edges[0] <= 0.0 < edges[-1]
    s.update(np.array([[1.0, 2.0, -3.0]], np.float32))
    edges, counts = s.histogram()
    data = np.array([0.0] * 12 + [1.0, 2.0, -3.0])
    np.testing.assert_array_equal(counts, np.histogram(data, edges)[0])
    assert s.bin_width * 63 <= 5.0 * 2  # sized for the new range, not grown from the tiny first one


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_per_channel_stats(axis):
    rng = np.random.default_rng(4)
    batches = [(rng.standard_normal((3, 4, 6)) * np.arange(1, 7) + i).astype(np.float32) for i in range(5)]
    s = TensorStatistics(channel_axis=axis, per_channel=True)
    for b in batches:
        s.update(b)
    if axis == 0:  # channels first in each batch: stack the batches, channels on axis 1 of the stack
        data, other = np.stack(batches), (0, 2, 3)
    else:
        data, other = np.concatenate(batches), tuple(d for d in range(3) if d != axis % 3)
    np.testing.assert_array_equal(s.channel_min, data.min(axis=other))
    np.testing.assert_array_equal(s.channel_max, data.max(axis=other))
    np.testing.assert_allclose(s.channel_mean, data.astype(np.float64).mean(axis=other), rtol=1e-12, atol=1e-12)
    assert s.min == data.min() and s.max == data.max()


def test_per_channel_needs_consistent_channels_and_an_axis():
    with pytest.raises(ValueError, match="channel_axis"):
        TensorStatistics(channel_axis=None, per_channel=True)
    s = TensorStatistics(channel_axis=1, per_channel=True)
    s.update(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="channels"):
        s.update(np.zeros((2, 5, 4), np.float32))
    with pytest.raises(ValueError, match="per_channel=False"):
        _ = TensorStatistics().update(np.ones(3, np.float32)).channel_mean


@pytest.mark.parametrize("per_channel", [False, True])
def test_nan_raises(per_channel):
    s = TensorStatistics(per_channel=per_channel)
    s.update(np.ones((2, 3), np.float32))
    x = np.ones((2, 3), np.float32)
    x[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        s.update(x)
    assert s.count == 6 and s.max == 1.0 and not s.has_sentinels  # the bad batch left no trace


@pytest.mark.parametrize("sentinel", [np.inf, -np.inf, np.finfo(np.float32).min, 1e30])
@pytest.mark.parametrize("per_channel", [False, True])
def test_masking_sentinels_are_recorded_not_histogrammed(sentinel, per_channel):
    s = TensorStatistics(per_channel=per_channel)
    s.update(np.ones((2, 3), np.float32))
    x = np.ones((2, 3), np.float32)
    x[1, 2] = sentinel
    s.update(x)
    assert s.has_sentinels and s.count == 6 and s.max == 1.0
    merged = TensorStatistics(per_channel=per_channel).update(np.ones((2, 3), np.float32)).merge(s)
    assert merged.has_sentinels


def test_empty_statistics_refuse_queries():
    s = TensorStatistics()
    assert s.count == 0
    with pytest.raises(ValueError, match="no statistics"):
        s.histogram()
    with pytest.raises(ValueError, match="no statistics"):
        _ = s.min


def test_z_score_range_and_histogram_within():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(20000).astype(np.float32)
    x[:3] = [40.0, -35.0, 60.0]
    s = TensorStatistics(max_hist_samples_per_batch=NO_SUBSAMPLING).update(x)
    assert s.z_score_range(math.inf) == (s.min, s.max)
    lo, hi = s.z_score_range(3.0)
    ref = x.astype(np.float64)
    assert lo == pytest.approx(ref.mean() - 3 * ref.std()) and hi == pytest.approx(ref.mean() + 3 * ref.std())
    assert s.z_score_range(1e6) == (s.min, s.max)  # clipped to the data
    edges, counts = s.histogram_within(lo, hi)
    centres = 0.5 * (edges[:-1] + edges[1:])
    assert centres.min() >= lo and centres.max() <= hi
    assert counts.sum() < x.size and counts.sum() >= 0.99 * x.size
    full_edges, full_counts = s.histogram()
    i0 = int(np.searchsorted(full_edges, edges[0]))
    np.testing.assert_array_equal(counts, full_counts[i0:i0 + counts.size])
    with pytest.raises(ValueError):
        s.z_score_range(0.0)


def test_histogram_within_never_empty():
    s = TensorStatistics(n_bins=8).update(np.array([0.0, 10.0], np.float32))
    edges, counts = s.histogram_within(5.01, 5.02)
    assert counts.size == 1 and edges.size == 2


def test_merge_equals_single_pass():
    batches = growing_batches(seed=6, n=10)
    whole = TensorStatistics(per_channel=True, max_hist_samples_per_batch=NO_SUBSAMPLING)
    a = TensorStatistics(per_channel=True, max_hist_samples_per_batch=NO_SUBSAMPLING)
    b = TensorStatistics(per_channel=True, max_hist_samples_per_batch=NO_SUBSAMPLING)
    for i, batch in enumerate(batches):
        whole.update(batch)
        (a if i % 2 else b).update(batch)
    a.merge(b)
    assert (a.count, a.min, a.max) == (whole.count, whole.min, whole.max)
    assert a.mean == pytest.approx(whole.mean, rel=1e-12) and a.std == pytest.approx(whole.std, rel=1e-12)
    np.testing.assert_allclose(a.channel_mean, whole.channel_mean, rtol=1e-12)
    np.testing.assert_array_equal(a.channel_max, whole.channel_max)
    edges, counts = a.histogram()
    assert counts.sum() == whole.count and edges[0] <= whole.min and whole.max < edges[-1]
    assert TensorStatistics(per_channel=True).merge(a).count == a.count  # into an empty one


def test_large_batch_histogram_is_subsampled():
    x = np.random.default_rng(0).standard_normal((8, 32, 112, 112)).astype(np.float32)
    s = TensorStatistics(per_channel=True)
    s.update(x)
    assert s.histogram()[1].sum() == 1 << 17


@pytest.mark.parametrize("shape", [(3, 10, 7, 5), (2, 3, 11, 13), (4, 32, 3, 3), (5, 64, 2, 2), (1, 1, 1, 1), (7, 5)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_torch_per_channel_extremes_are_exact_for_any_channel_count(shape, channels_last):
    """The torch summariser reduces few-channel matrices side by side (speed): the per-channel
    min / max must still be exactly torch's own, remainder rows included."""
    torch = pytest.importorskip("torch")
    from hwquant.torch.statistics import summarize_tensor

    t = torch.randn(shape)
    if channels_last and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    dims = tuple(d for d in range(t.dim()) if d != 1)
    s = summarize_tensor(t, TensorStatistics(channel_axis=1, per_channel=True))
    np.testing.assert_array_equal(s.channel_min, t.amin(dim=dims).double().numpy())
    np.testing.assert_array_equal(s.channel_max, t.amax(dim=dims).double().numpy())
    assert (s.min, s.max) == (t.min().item(), t.max().item())


def test_shifted_statistics_equal_those_of_the_shifted_data_and_keep_updating():
    rng = np.random.default_rng(3)
    x, y, c = rng.normal(size=(4, 3, 5)), rng.normal(size=(4, 3, 5)) * 2, 0.625
    moved = TensorStatistics(per_channel=True, n_bins=64).update(x).shifted(c).update(y + c)
    direct = TensorStatistics(per_channel=True, n_bins=64).update(x + c).update(y + c)
    for attr in ("count", "min", "max", "mean", "std"):
        assert getattr(moved, attr) == pytest.approx(getattr(direct, attr))
    np.testing.assert_allclose(moved.channel_mean, direct.channel_mean)
    edges, counts = moved.histogram()
    assert counts.sum() == x.size + y.size
    data = np.concatenate([(x + c).ravel(), (y + c).ravel()])
    np.testing.assert_array_equal(counts, np.histogram(data, edges)[0])  # edges moved with the data


def test_add_constant_spreads_over_channels():
    s = TensorStatistics(per_channel=True).update(np.ones((2, 3, 4)))
    s.add_constant(5.0, 6)  # two more values per channel
    assert s.count == 30 and s.max == 5.0
    np.testing.assert_allclose(s.channel_mean, (8 * 1 + 2 * 5) / 10)
    with pytest.raises(ValueError, match="spread evenly"):
        s.add_constant(1.0, 4)


@pytest.mark.parametrize("axis", [-1, 1])
def test_fast_summary_agrees_with_the_precise_one(axis):
    """summarize(precise=False) (the Keras adapter's): extremes exact, mean and spread within float32 sums'
    accuracy (a layout with few channels goes through the widened column reduction)."""
    from hwquant.core.statistics.tensor_statistics import summarize

    x = (np.random.default_rng(5).standard_normal((4, 7, 9, 10)) * 3 + 1).astype(np.float32)
    stats = TensorStatistics(channel_axis=axis, per_channel=True, max_hist_samples_per_batch=NO_SUBSAMPLING)
    precise, fast = summarize(x, stats), summarize(x, stats, precise=False)
    np.testing.assert_array_equal(fast.channel_min, precise.channel_min)
    np.testing.assert_array_equal(fast.channel_max, precise.channel_max)
    np.testing.assert_allclose(fast.channel_sum, precise.channel_sum, rtol=1e-5)
    assert (fast.min, fast.max, fast.count) == (precise.min, precise.max, precise.count)
    assert fast.mean == pytest.approx(precise.mean, rel=1e-5) and fast.m2 == pytest.approx(precise.m2, rel=1e-4)
    np.testing.assert_array_equal(fast.sample, precise.sample)


def test_a_batch_summarised_in_chunks_gives_the_batch_statistics():
    """A framework that runs a batch in chunks (Keras, to bound memory) keeps the batch's histogram sample:
    the statistics are those of the whole batch, whatever the chunk size."""
    from hwquant.core.statistics.tensor_statistics import merge_chunks, summarize

    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((12, 40, 40, 6)).astype(np.float32) * 2 + 0.5 for _ in range(2)]
    whole = TensorStatistics(channel_axis=-1, per_channel=True, max_hist_samples_per_batch=5000)
    chunked = TensorStatistics(channel_axis=-1, per_channel=True, max_hist_samples_per_batch=5000)
    for b in batches:
        whole.add(summarize(b, whole))
        chunked.add(merge_chunks([summarize(b[i:i + 5], chunked, rows_of=(i, len(b))) for i in range(0, len(b), 5)]))
    for a, b in zip(whole.histogram(), chunked.histogram()):
        np.testing.assert_array_equal(a, b)
    assert whole.min == chunked.min and whole.max == chunked.max
    np.testing.assert_allclose([whole.mean, whole.std], [chunked.mean, chunked.std], rtol=1e-6)
    np.testing.assert_allclose(whole.channel_mean, chunked.channel_mean, rtol=1e-6)
