"""The representative dataset of a PyTorch model: each batch checked (core/pipeline/representative_data.py
does the passes) and converted to torch tensors. A batch is a list of tensors, one per positional
input, or a dict naming the forward's parameters (a model whose forward takes its inputs by keyword):
its entries become a list in the forward's parameter order."""
from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any, List, Optional

import numpy as np
import torch

from hwquant.core.pipeline.representative_data import BaseRepresentativeData, RepresentativeDataError


def _forward_parameters(model: torch.nn.Module) -> List[inspect.Parameter]:
    try:
        return list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # (a TorchScript method has none: the session refuses those first)
        return []


def keyword_input_order(model: torch.nn.Module, names: List[str]) -> List[str]:
    """The names a dict batch gives, in the order of ``model.forward``'s parameters. They must be
    parameters the forward names, and its leading ones: capture takes the given inputs as the first
    parameters and traces the rest at their defaults."""
    params = _forward_parameters(model)
    named = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    varkw = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)
    unknown = [n for n in names if n not in named]
    cls = type(model).__name__
    if unknown:
        how = (f"; it takes them through **{varkw}, which capture cannot name: give forward named parameters "
               f"(def forward(self, *, {', '.join(names)}): ...), or wrap the model in a module whose forward does"
               if varkw else "")
        raise RepresentativeDataError(f"representative batches name {unknown}, which {cls}.forward does not take "
                                      f"(its parameters: {named}){how}")
    order = [n for n in named if n in names]
    gap = next((n for n in named[:named.index(order[-1])] if n not in names), None)
    if gap is not None:
        raise RepresentativeDataError(
            f"representative batches give {order} but not '{gap}', which {cls}.forward takes before "
            f"'{order[-1]}': the given inputs must be the forward's leading parameters (the others are traced at "
            f"their defaults); add '{gap}' to the batches")
    return order


def check_positional_inputs(model: torch.nn.Module, n_inputs: int) -> None:
    """A list batch fills the forward's positional parameters: refuse one the forward cannot take that
    way (inputs only by keyword, or through **kwargs), saying how to pass them."""
    params = _forward_parameters(model)
    if not params or any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if n_inputs <= len(positional):
        return
    keyword = [p.name for p in params if p.kind == p.KEYWORD_ONLY]
    required = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    keyword = required or keyword  # (the ones a dict must name)
    varkw = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)
    cls = type(model).__name__
    if keyword:
        how = ("yield each batch as a dict naming them ({" + ", ".join(f"'{n}': tensor" for n in keyword)
               + "}): its entries are passed by name")
    elif varkw:
        how = (f"it takes them through **{varkw}, which capture cannot name: give forward named parameters "
               f"(def forward(self, *, image): ...) and yield each batch as a dict ({{'image': tensor}}), or wrap the "
               "model in a module whose forward takes the tensors positionally")
    else:
        return  # (too many tensors for a plain forward: the session's count check says so)
    raise RepresentativeDataError(
        f"representative batches hold {n_inputs} tensor(s) but {cls}.forward takes "
        f"{len(positional)} positional input(s) ({[p.name for p in positional]})"
        + (f" and {keyword} only by keyword" if keyword else "") + f": {how}")


class RepresentativeData(BaseRepresentativeData):
    """The representative data of a PyTorch model: batches of torch tensors (numpy arrays accepted),
    moved to `device`. Dict batches are ordered by ``model.forward``'s parameters (without a model:
    the first batch's order); ``input_names`` are their keys in that order (None for list batches)."""

    def __init__(self, data_gen: Any, n_inputs: Optional[int] = None, device: Any = None,
                 max_batches: Optional[int] = None, model: Optional[torch.nn.Module] = None):
        super().__init__(data_gen, n_inputs, device, max_batches)
        self.model = model
        self.input_names: Optional[List[str]] = None

    def _from_mapping(self, batch: Mapping, index: int) -> List[Any]:
        names = list(batch)
        if not all(isinstance(n, str) for n in names):
            raise RepresentativeDataError(f"batch {index} is a dict with keys {names[:8]}; a dict batch names the "
                                          "forward's parameters (str keys)")
        if self.input_names is None:
            if index != 0:
                raise RepresentativeDataError(f"batch {index} is a dict but the first batch was a list; yield every "
                                              "batch the same way")
            self.input_names = keyword_input_order(self.model, names) if self.model is not None else names
        elif set(names) != set(self.input_names):
            raise RepresentativeDataError(f"batch {index} names {sorted(names)} but the first batch named "
                                          f"{sorted(self.input_names)}; every batch must give the same inputs")
        return [batch[n] for n in self.input_names]

    def _check(self, batch: Any, index: int) -> List[torch.Tensor]:
        if isinstance(batch, (list, tuple)) and len(batch) == 1 and isinstance(batch[0], Mapping):
            batch = batch[0]  # ([{'image': x}]: the list-of-inputs habit around a dict)
        if isinstance(batch, Mapping):
            batch = self._from_mapping(batch, index)
        elif self.input_names is not None:
            raise RepresentativeDataError(f"batch {index} is a {type(batch).__name__} but the first batch was a dict "
                                          f"naming {self.input_names}; yield every batch the same way")
        if isinstance(batch, (torch.Tensor, np.ndarray)):
            batch = [batch]
        if not isinstance(batch, (list, tuple)):
            raise RepresentativeDataError(f"batch {index} is a {type(batch).__name__}; each item must be a list of "
                                          "tensors, one per model input (or a dict naming the forward's parameters)")
        tensors = [torch.as_tensor(x) if isinstance(x, np.ndarray) else x for x in batch]
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            raise RepresentativeDataError(f"batch {index} holds {[type(t).__name__ for t in tensors]}; expected tensors "
                                          "or numpy arrays")
        for k, t in enumerate(tensors):
            if t.is_meta:  # (no values: every statistic would fail deep inside, `.item()` first)
                raise RepresentativeDataError(
                    f"input {k} of batch {index} is on the meta device, which holds shapes but no values: "
                    "representative data must hold real values, on cpu or cuda (e.g. real samples, or "
                    "torch.randn(shape) for a smoke test)")
        self._check_count_and_shapes(index, [tuple(t.shape) for t in tensors], "tensor")
        ranks = [t.dim() for t in tensors]
        if ranks != [len(s) + 1 for s in self._shapes]:
            raise RepresentativeDataError(f"batch {index} has inputs of {ranks} dimensions but the first batch had "
                                          f"{[len(s) + 1 for s in self._shapes]}; sizes may vary between batches "
                                          "(image pyramids, sequence lengths), the number of dimensions may not")
        self._check_finite(index, (not t.is_floating_point() or bool(torch.isfinite(t).all()) for t in tensors))
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
