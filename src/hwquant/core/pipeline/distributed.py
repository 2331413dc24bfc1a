"""Quantization across processes, the framework-free part: what the ranks exchange and in what order, so
that every rank ends with the result one process reading all of the data would compute.

A framework gives a :class:`Collective` (torch/distributed.py wraps ``torch.distributed``); a run without
one, or with one process, uses :data:`SINGLE_PROCESS` and takes exactly the single-process path.

- **Data.** Each rank reads its own part of the representative data (as DDP's ``DistributedSampler``
  gives it). The ranks' batches interleave into the global order: local batch ``k`` of rank ``r`` is
  global batch ``k * world_size + r``. One process reading the batches in that order computes the same.
- **Calibration** (:func:`statistics_pass`): each rank summarises its batches; after every batch the
  ranks exchange their summaries (without the histogram samples) and all add every summary in global
  order; the histogram counts, each rank's own samples binned on the common window, are summed at the
  end. The histogram's subsample is seeded by the global batch index, so the thresholds equal one
  process's, bit for bit.
- **Work split** (:func:`my_share`, :func:`gather_rows`): independent items (mixed-precision candidates'
  measurements) are dealt round robin; each rank computes its own and all gather every row.
- **Checks**: :func:`check_same` compares fingerprints (the model, the TPC) on every rank; data
  ending early on one rank, or a rank failing (it tells the others, :meth:`Collective.guard`) or
  vanishing (the framework's timeout), raise :class:`DistributedError` on every rank.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from hwquant.errors import HwquantError
# the rank of this process (torch/distributed.py registers torch's): a leaf of its own, which fileio asks
# without importing core
from hwquant.process_rank import process_rank, register_process_rank  # noqa: F401 (re-exported)

log = logging.getLogger("hwquant.distributed")


class DistributedError(HwquantError, RuntimeError):
    """The ranks of a multi-process run disagree (model, TPC, data length) or one of them failed."""


@dataclass
class _Failure:
    """What a failing rank sends in place of its payload: the others raise with its message."""
    rank: int
    message: str


class Collective:
    """The ranks of one run. ``exchange`` is the one operation the algorithms need: every rank gives one
    Python object and gets every rank's, in rank order. A framework implements ``_all_gather``."""

    rank: int = 0
    world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def _all_gather(self, payload: Any, what: str) -> List[Any]:
        raise NotImplementedError

    def exchange(self, payload: Any, what: str) -> List[Any]:
        """Every rank's ``payload``, in rank order. ``what``: what the ranks are doing, for the messages.
        A rank that announced a failure makes every other raise DistributedError with its message."""
        if not self.distributed:
            return [payload]
        replies = self._all_gather(payload, what)
        failed = [r for r in replies if isinstance(r, _Failure)]
        if failed:
            raise DistributedError("; ".join(f"rank {f.rank} failed ({f.message})" for f in failed)
                                   + f": rank {self.rank} stops too (it was {what})")
        return replies

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Run a multi-process stage: an exception on this rank is announced to the others (waiting in
        their next exchange), so they stop with its message instead of waiting for the timeout."""
        try:
            yield
        except DistributedError:
            raise  # the others know already (it came from an exchange) or will time out
        except BaseException as e:
            if self.distributed:
                with contextlib.suppress(Exception):
                    self._all_gather(_Failure(self.rank, f"{type(e).__name__}: {e}"), what)
            raise


class SingleProcess(Collective):
    """One process: every exchange returns the payload alone."""

    def _all_gather(self, payload: Any, what: str) -> List[Any]:
        return [payload]


SINGLE_PROCESS = SingleProcess()


# ------------------------------------------------------------------------------------------- checks
def fingerprint(*parts: Any) -> str:
    """A short hash of ``parts`` (arrays by their bytes, the rest by their pickle, else their repr)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(str((part.dtype, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
            continue
        try:
            h.update(pickle.dumps(part, protocol=4))
        except Exception:  # (unpicklable: a callable in a config, e.g.)
            h.update(repr(part).encode())
    return h.hexdigest()[:16]


def graph_fingerprint(graph: Any) -> str:
    """The captured model: its nodes (name, kind, operator, inputs, output shape) and weights."""
    h = hashlib.sha256()
    for node in graph:
        op = getattr(node.type, "__qualname__", None) or repr(node.type)
        h.update(repr((node.name, node.kind, op, tuple(node.inputs), node.output_shape)).encode())
        for key in sorted(node.weights, key=repr):
            h.update(fingerprint(np.asarray(node.weights[key])).encode())
    return h.hexdigest()[:16]


def check_same(collective: Collective, what: str, values: Dict[str, str]) -> None:
    """Every rank must hold the same ``values`` (name -> fingerprint): the ranks that differ from rank 0
    are named, on every rank."""
    if not collective.distributed:
        return
    replies = collective.exchange(values, f"comparing the {what} of every rank")
    differ = [(r, name) for r, theirs in enumerate(replies) for name in values if theirs.get(name) != replies[0].get(name)]
    if differ:
        names = sorted({name for _, name in differ})
        ranks = sorted({r for r, _ in differ})
        raise DistributedError(f"the ranks quantize different things: rank(s) {ranks} have another {' and '.join(names)} "
                               f"than rank 0 (fingerprints {[replies[r] for r in [0] + ranks]}); every rank must "
                               "pass the same model (same weights: load them before quantizing, with the same seed) "
                               "and the same target platform")


# ---------------------------------------------------------------------------------------- calibration
class _GlobalIndex:
    """The global index of the batch being summarised (set by statistics_pass before it yields it)."""
    value = 0


class _RecordingStatistics:
    """Stands for a TensorStatistics while a rank summarises its batches: the summaries are kept (to be
    exchanged) instead of added, and the histogram subsample is drawn for the global batch index."""

    def __init__(self, stats: Any, index: _GlobalIndex, record: Callable[[Any], None]):
        self.stats, self.index, self.record = stats, index, record
        self.per_channel, self.channel_axis = stats.per_channel, stats.channel_axis
        self.max_hist_samples_per_batch = stats.max_hist_samples_per_batch

    def sample_indices(self, size: int, batch_index: Optional[int] = None) -> Optional[np.ndarray]:
        return self.stats.sample_indices(size, self.index.value if batch_index is None else batch_index)

    def add(self, summary: Any) -> "_RecordingStatistics":
        self.record(summary)
        return self


def statistics_pass(collective: Collective, statistics: Dict[str, Any], data: Iterable[Any],
                    run: Callable[[Dict[str, Any], Iterable[Any]], int]) -> int:
    """``run(statistics, batches)`` (the framework's pass, adding each batch's summary of each tensor)
    over this rank's ``data``, with every rank's batches in ``statistics``: the statistics of one process
    adding all of them in global order. Returns the number of batches of all ranks. With one process:
    ``run(statistics, data)``.

    After each batch the ranks exchange its summaries without their histogram samples (extremes,
    moments, per-channel figures: kilobytes), and every rank adds every summary in global order, its own
    with their samples. Everything but the histogram counts is then the same on every rank; each rank's
    counts hold its own samples, binned on the same window, and one exchange at the end sums them
    (TensorStatistics.sum_histogram_counts)."""
    if not collective.distributed:
        return run(statistics, data)
    world, rank = collective.world_size, collective.rank
    index = _GlobalIndex()
    pending: Dict[str, Any] = {}

    def recorder(name: str) -> Callable[[Any], None]:
        return lambda summary: pending.__setitem__(name, summary)

    views = {name: _RecordingStatistics(s, index, recorder(name)) for name, s in statistics.items()}
    total = rounds = 0

    def share(local: Optional[int]) -> None:
        """Exchange this rank's summaries of local batch ``local`` (None: its data has ended); add all."""
        nonlocal total, rounds
        payload = None if local is None else {name: _without_sample(s) for name, s in pending.items()}
        replies = collective.exchange(payload, "collecting statistics" if local is None
                                      else f"collecting statistics (local batch {local})")
        ended = [r for r, p in enumerate(replies) if p is None]
        if ended and len(ended) < world:
            going = [r for r in range(world) if r not in ended]
            raise DistributedError(
                f"the representative data of rank(s) {ended} ended after {rounds} batches while rank(s) {going} have "
                "more: give every rank the same number of batches (torch.utils.data.DistributedSampler with "
                "drop_last=True, or shard one dataset with hwquant.torch.distributed.shard)")
        for r, summaries in enumerate(replies):  # rank order: global order within this round
            if summaries is None:
                continue
            for name, summary in (pending if r == rank else summaries).items():
                statistics[name].add(summary)
            total += 1
        rounds += 1
        pending.clear()

    def batches() -> Iterator[Any]:
        for local, batch in enumerate(data):
            index.value = local * world + rank
            yield batch
            share(local)  # the pass asks for the next batch once this one is summarised

    run(views, batches())
    share(None)  # this rank's data has ended: so must every other's
    counts = collective.exchange({name: s.histogram_counts() for name, s in statistics.items()},
                                 "summing the histograms")
    for name, s in statistics.items():
        s.sum_histogram_counts([c[name] for c in counts])
    return total


def _without_sample(summary: Any) -> Any:
    """A batch summary without its histogram sample (what the other ranks need of it)."""
    return dataclasses.replace(summary, sample=summary.sample[:0])


# ------------------------------------------------------------------------------------------ work split
def my_share(collective: Collective, n_items: int) -> List[int]:
    """The items (of ``n_items``) this rank computes: dealt round robin."""
    return list(range(collective.rank, n_items, collective.world_size))


def gather_rows(collective: Collective, mine: Dict[int, Any], n_items: int, what: str) -> List[Any]:
    """Every item's row from the rank that computed it (``mine``: this rank's, by item index)."""
    rows: Dict[int, Any] = {}
    for theirs in collective.exchange(mine, what):
        rows.update(theirs)
    missing = [i for i in range(n_items) if i not in rows]
    if missing:  # (my_share deals every item: a rank computing other items is a bug, not a set-up)
        raise DistributedError(f"no rank computed items {missing[:5]} while {what}")
    return [rows[i] for i in range(n_items)]


def global_batches(collective: Collective, local: Sequence[Any], what: str) -> List[Any]:
    """Every rank's ``local`` batches in global order (round robin: local batch k of rank r is global
    batch k * world_size + r; a rank with fewer batches simply has no more turns)."""
    if not collective.distributed:
        return list(local)
    per_rank = collective.exchange(list(local), what)
    out: List[Any] = []
    for k in range(max(len(b) for b in per_rank)):
        out.extend(b[k] for b in per_rank if k < len(b))
    return out


def first_batches(collective: Collective, data: Iterable[Any], n_samples: int, what: str) -> Iterable[Any]:
    """The whole batches of the global data that the first ``n_samples`` samples fall in, in global order,
    on every rank (each rank reads only its first batches). With one process: ``data`` itself."""
    if not collective.distributed:
        return data
    local, seen = [], 0
    for batch in data:
        if seen >= n_samples:
            break
        local.append(batch)
        seen += len(batch[0])
    return global_batches(collective, local, what)


def check_same_run(collective: Collective, graph: Any, tpc: Any) -> None:
    """Every rank captured the same model (nodes and weights) and holds the same target platform."""
    if not collective.distributed:
        return
    dump = getattr(tpc, "model_dump_json", None)
    check_same(collective, "model and target platform", {
        "model": graph_fingerprint(graph), "target platform": fingerprint(dump() if dump else tpc)})
