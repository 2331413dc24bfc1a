"""The rank of this process in a multi-process run, as its framework tells it: files are written by rank 0
only (fileio.write_through_temporary). A leaf, importing nothing of hwquant: fileio (which tpc and core
write through) asks it without importing core; torch/distributed.py registers torch.distributed's rank when
it loads (core/pipeline/distributed.py, the multi-process algorithms, re-exports both functions)."""
from typing import Callable

_process_rank: Callable[[], int] = lambda: 0


def register_process_rank(rank_of_this_process: Callable[[], int]) -> None:
    """Make ``rank_of_this_process()`` the answer of :func:`process_rank` (0 until a framework registers)."""
    global _process_rank
    _process_rank = rank_of_this_process


def process_rank() -> int:
    """This process's rank: 0 in a single-process run."""
    return _process_rank()
