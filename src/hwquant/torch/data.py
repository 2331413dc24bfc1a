"""The representative dataset: checked batch by batch, so bad data is reported clearly (what is
wrong, in which batch, how to fix it) before it can produce a silently broken model."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch

from hwquant.errors import HwquantError


class RepresentativeDataError(HwquantError, ValueError):
    """The representative dataset is empty, malformed or holds non-finite values."""


# A pass over the data stops here: a generator that never ends (an endless DataLoader cycle) would
# otherwise hang calibration. A few hundred samples are enough for PTQ.
MAX_BATCHES_PER_PASS = 1024


class RepresentativeData:
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

    def first_batch(self) -> List[torch.Tensor]:
        for batch in self:
            return batch
        raise AssertionError("unreachable")  # __iter__ raises on an empty dataset

    def __iter__(self) -> Iterator[List[torch.Tensor]]:
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

    def _check(self, batch: Any, index: int) -> List[torch.Tensor]:
        if isinstance(batch, (torch.Tensor, np.ndarray)):
            batch = [batch]
        if not isinstance(batch, (list, tuple)):
            raise RepresentativeDataError(f"batch {index} is a {type(batch).__name__}; each item must be a list of "
                                          "tensors, one per model input")
        tensors = [torch.as_tensor(x) if isinstance(x, np.ndarray) else x for x in batch]
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            raise RepresentativeDataError(f"batch {index} holds {[type(t).__name__ for t in tensors]}; expected tensors "
                                          "or numpy arrays")
        if self.n_inputs is not None and len(tensors) != self.n_inputs:
            raise RepresentativeDataError(f"batch {index} has {len(tensors)} input(s) but the model takes "
                                          f"{self.n_inputs}; yield a list with one tensor per model input")
        ranks = [t.dim() for t in tensors]
        if self._shapes is None:
            self._shapes = [tuple(t.shape[1:]) for t in tensors]
        elif [tuple(t.shape[1:]) for t in tensors] != self._shapes:
            self.uniform_shapes = False
        if ranks != [len(s) + 1 for s in self._shapes]:
            raise RepresentativeDataError(f"batch {index} has inputs of {ranks} dimensions but the first batch had "
                                          f"{[len(s) + 1 for s in self._shapes]}; sizes may vary between batches "
                                          "(image pyramids, sequence lengths), the number of dimensions may not")
        for k, t in enumerate(tensors):
            if t.is_floating_point() and not torch.isfinite(t).all():
                raise RepresentativeDataError(f"input {k} of batch {index} contains NaN or inf values; clean or "
                                              "normalise the representative data")
        if tensors and tensors[0].dim() > 0 and tensors[0].shape[0] == 1 and not self._warned_batch_one:
            warnings.warn("representative batches of size 1: statistics are fine, but batches of 16-64 make "
                          "calibration faster", stacklevel=4)
            self._warned_batch_one = True
        if self.device is not None:
            tensors = [t.to(self.device) for t in tensors]
        return [t.float() if t.is_floating_point() else t for t in tensors]


def check_same_input_shapes(batch: List[torch.Tensor], expected: List[Any], what: str) -> None:
    """Refuse a batch whose inputs differ, beyond the batch dimension, from the captured input shapes
    `expected` (one shape per input, the batch first)."""
    for k, (t, shape) in enumerate(zip(batch, expected)):
        if isinstance(shape, tuple) and tuple(t.shape[1:]) != tuple(shape[1:]):
            raise RepresentativeDataError(
                f"{what}: input {k} has shape {tuple(t.shape[1:])} (without the batch dimension) where the model "
                f"was quantized with {tuple(shape[1:])}; give batches shaped like the representative data")
