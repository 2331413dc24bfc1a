"""The representative dataset, framework-free part: each pass calls the user's generator again, reads
at most MAX_BATCHES_PER_PASS batches, refuses an empty or re-used iterator; each framework checks and
converts the batches (`_check`), so bad data is reported clearly (what is wrong, in which batch, how
to fix it) before it can produce a silently broken model."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple

from hwquant.errors import HwquantError


class RepresentativeDataError(HwquantError, ValueError):
    """The representative dataset is empty, malformed or holds non-finite values."""


# A pass over the data stops here: a generator that never ends (an endless DataLoader cycle) would
# otherwise hang calibration. A few hundred samples are enough for PTQ.
MAX_BATCHES_PER_PASS = 1024


class BaseRepresentativeData:
    """Wraps `representative_data_gen` (a zero-argument callable returning an iterator of lists of
    tensors, one per model input). Each pass calls it again; every batch is validated; a pass reads
    at most `max_batches` batches (warning once when a generator has more)."""

    def __init__(self, data_gen: Callable[[], Any], n_inputs: Optional[int] = None, device: Any = None,
                 max_batches: Optional[int] = None):
        if not callable(data_gen):
            raise RepresentativeDataError(
                f"representative_data_gen must be a callable with no arguments returning an iterator of lists of "
                f"tensors (e.g. `def gen(): yield [batch]`), got {type(data_gen).__name__}")
        self.data_gen = data_gen
        self.n_inputs = n_inputs
        self.device = device
        self.max_batches = max_batches or MAX_BATCHES_PER_PASS
        self._shapes: Optional[List[Tuple[int, ...]]] = None
        self._warned_batch_one = False
        self._warned_cut = False
        self.uniform_shapes = True  # every batch so far had the first batch's sizes
        self._last_iterator: Any = None

    @property
    def first_shapes(self) -> Optional[List[Tuple[int, ...]]]:
        """The first batch's input shapes without the batch dimension (None before any pass)."""
        return self._shapes

    def first_batch(self) -> List[Any]:
        for batch in self:
            return batch
        raise AssertionError("unreachable")  # __iter__ raises on an empty dataset

    def __iter__(self) -> Iterator[List[Any]]:
        try:
            iterator = iter(self.data_gen())
        except TypeError as e:
            raise RepresentativeDataError(f"representative_data_gen() must return an iterator (use `yield`): {e}") from e
        if iterator is self._last_iterator:  # its batches were (partly) read by the previous pass
            raise RepresentativeDataError(
                "representative_data_gen returned the same iterator as on its previous call: each call must return "
                "a fresh iterator (write it as a generator function with `yield`, or return iter(list_of_batches) / "
                "iter(data_loader) inside it)")
        self._last_iterator = iterator
        count = 0
        for i, batch in enumerate(iterator):
            if i >= self.max_batches:
                if not self._warned_cut:
                    warnings.warn(f"representative_data_gen yielded more than {self.max_batches} batches (never "
                                  f"ending?): each pass uses the first {self.max_batches}; a few hundred samples "
                                  "are enough; make the generator finite to silence this", stacklevel=3)
                    self._warned_cut = True
                break
            yield self._check(batch, i)
            count += 1
        if count == 0:
            raise RepresentativeDataError("representative_data_gen yielded no batches: give at least one batch of "
                                          "representative inputs (a few hundred samples are typical)")

    def _check(self, batch: Any, index: int) -> List[Any]:
        """The batch as a list of the framework's tensors, one per model input, checked."""
        raise NotImplementedError

    def _check_count_and_shapes(self, index: int, shapes: List[Tuple[int, ...]], noun: str) -> None:
        """Refuse a batch with another number of inputs than the model takes (`noun`: what one input is);
        note whether its inputs' sizes (`shapes`, the batch first) are the first batch's."""
        if self.n_inputs is not None and len(shapes) != self.n_inputs:
            raise RepresentativeDataError(f"batch {index} has {len(shapes)} input(s) but the model takes "
                                          f"{self.n_inputs}; yield a list with one {noun} per model input")
        if self._shapes is None:
            self._shapes = [s[1:] for s in shapes]
        elif [s[1:] for s in shapes] != self._shapes:
            self.uniform_shapes = False

    @staticmethod
    def _check_finite(index: int, finite: Iterable[bool]) -> None:
        """Refuse a batch with an input not finite everywhere (`finite`: one flag per input, read in order)."""
        for k, ok in enumerate(finite):
            if not ok:
                raise RepresentativeDataError(f"input {k} of batch {index} contains NaN or inf values; clean or "
                                              "normalise the representative data")
