"""The representative dataset of a PyTorch model: each batch checked (core/representative_data.py
does the passes) and converted to torch tensors."""
from __future__ import annotations

import warnings
from typing import Any, List

import numpy as np
import torch

from hwquant.core.representative_data import BaseRepresentativeData, RepresentativeDataError


class RepresentativeData(BaseRepresentativeData):
    """The representative data of a PyTorch model: batches of torch tensors (numpy arrays accepted),
    moved to `device`."""

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
