"""How every test rank ends (tests/test_distributed.py's spawned workers, its torchrun job, tests/test_qat.py's DDP
workers): once its work is saved or printed, the rank leaves with os._exit, without gloo's teardown.

Tearing the group down (dist.destroy_process_group, or the interpreter's exit destroying it) can race the other
rank's exit: gloo's C++ side then aborts the process ("terminate called without an active exception", SIGABRT)
after the work was done, which failed CI runs now and then. os._exit skips the teardown; the output is flushed
first, since it skips Python's flushing too."""
import os
import sys
from typing import NoReturn


def exit_rank(code: int = 0) -> NoReturn:
    """End this rank now, with exit status `code`, without tearing its process group down."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing left to keep
            pass
    os._exit(code)
