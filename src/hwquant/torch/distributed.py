"""torch.distributed's side of multi-process quantization (core/pipeline/distributed.py holds the algorithms).

When the user's script has initialised ``torch.distributed`` (``torchrun``, ``init_process_group``) with
more than one process, every facade quantizes across the ranks: each rank passes the same model, TPC and
configuration and its own part of the representative data. hwquant exchanges its Python objects over a
gloo group of its own (CPU, whatever the default backend: NCCL too), created once with a timeout
(HWQUANT_DISTRIBUTED_TIMEOUT seconds, default 600), so a rank that dies or hangs stops the others with a
message instead of a hang. Gradients (GPTQ) are averaged on the tensors' own device: NCCL on GPUs, the
gloo group on CPU.
"""
from __future__ import annotations

import atexit
import logging
import os
from datetime import timedelta
from typing import Any, Callable, Dict, Iterator, List, Sequence

import torch
import torch.distributed as dist

from hwquant.core.pipeline.distributed import SINGLE_PROCESS, Collective, DistributedError, register_process_rank
from hwquant.errors import InvalidConfigError
from hwquant.logger import set_progress_bars

log = logging.getLogger("hwquant.distributed")

TIMEOUT_ENV = "HWQUANT_DISTRIBUTED_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0

_collectives: Dict[Any, "TorchCollective"] = {}  # per default process group
# (released before the interpreter tears modules down, so a group's C++ side never outlives its runtime)
atexit.register(_collectives.clear)


def timeout_seconds() -> float:
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InvalidConfigError(f"{TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}")
    return value


def is_distributed() -> bool:
    """Whether this process is one of several ranks of an initialised torch.distributed run."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


register_process_rank(lambda: dist.get_rank() if is_distributed() else 0)


class TorchCollective(Collective):
    """The ranks of the default process group, exchanging objects over hwquant's own gloo group."""

    def __init__(self) -> None:
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.timeout = timeout_seconds()
        # (every rank creates it at the same point: the first quantization call of the run)
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.timeout))

    def _all_gather(self, payload: Any, what: str) -> List[Any]:
        out: List[Any] = [None] * self.world_size
        try:
            dist.all_gather_object(out, _on_cpu(payload), group=self.group)
        except RuntimeError as e:
            raise DistributedError(
                f"rank {self.rank}: no answer from the other ranks while {what} (waiting up to {self.timeout:g} s): "
                f"one of them failed, was killed or is stuck (see its log); {TIMEOUT_ENV} sets the wait "
                f"({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") from e
        return out

    def average_(self, tensors: Sequence[torch.Tensor], what: str) -> None:
        """Replace each tensor (all on one device) by its mean over the ranks, in one all-reduce."""
        if not tensors:
            return
        flat = torch.cat([t.reshape(-1) for t in tensors])
        group = self.group if flat.device.type == "cpu" else None  # CUDA tensors: the default (NCCL) group
        try:
            dist.all_reduce(flat, group=group)
        except RuntimeError as e:
            raise DistributedError(f"rank {self.rank}: the all-reduce of {what} failed or timed out (a rank "
                                   f"failed or is stuck; see its log): {str(e).splitlines()[0][:200]}") from e
        flat /= self.world_size
        offset = 0
        for t in tensors:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()


def _on_cpu(payload: Any) -> Any:
    """``payload`` with its tensors on the CPU: a pickled CUDA tensor would be unpickled on the sender's GPU
    (another rank's device); the receiver moves what it gets to its own. A view of a larger tensor (a batch
    sliced from the whole dataset) is copied: pickling a view sends all of its storage."""
    if isinstance(payload, torch.Tensor):
        t = payload.detach().cpu()
        return t.clone() if t.untyped_storage().nbytes() > t.numel() * t.element_size() else t
    if isinstance(payload, (list, tuple)):
        return type(payload)(_on_cpu(p) for p in payload)
    if isinstance(payload, dict):
        return {k: _on_cpu(v) for k, v in payload.items()}
    return payload


def collective() -> Collective:
    """The run's collective: TorchCollective under an initialised multi-process torch.distributed, else
    the single process."""
    if not is_distributed():
        return SINGLE_PROCESS
    key = dist.group.WORLD
    if key not in _collectives:
        _collectives[key] = TorchCollective()
        if dist.get_rank() != 0:  # one set of bars (rank 0's) on the terminal
            set_progress_bars(False)
        log.info("quantizing across %d processes (this is rank %d); thresholds, choices and trained weights are "
                 "the same on every rank", dist.get_world_size(), dist.get_rank())
    return _collectives[key]


def shard(representative_data_gen: Callable[[], Any]) -> Callable[[], Iterator[Any]]:
    """Each rank's part of a dataset every rank can read whole: batch ``i`` goes to rank ``i % world_size``.
    A last round of fewer than world_size batches is dropped (every rank needs as many batches), and said.
    Without torch.distributed (or with one process) the generator is returned as it is."""
    if not is_distributed():
        return representative_data_gen
    rank, world = dist.get_rank(), dist.get_world_size()

    def mine() -> Iterator[Any]:
        round_: List[Any] = []
        for batch in representative_data_gen():
            round_.append(batch)
            if len(round_) == world:
                yield round_[rank]
                round_ = []
        if round_:
            log.info("hwquant.torch.distributed.shard: the last %d batch(es) were dropped (each of the %d ranks "
                     "needs the same number of batches)", len(round_), world)
    return mine
