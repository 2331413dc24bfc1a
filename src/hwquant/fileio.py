"""File writing that never leaves a partial file behind."""
from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, List, Union

from hwquant.errors import FileWriteError
from hwquant.process_rank import process_rank


def _umask() -> int:
    """The process umask, read without changing it (os.umask sets it, which other threads would see)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def new_file_mode() -> int:
    """The mode an ordinary new file gets (0666 less the umask); temporary files start at 0600."""
    return 0o666 & ~_umask()


# Temporary files are named `.hwquant-<pid>-<target name>.<random><suffix>`, the troubleshooting report's
# staging folder `.hwquant-xquant-<pid>-<random>` (xquant/outputs.py): a writer killed before its rename
# (SIGKILL, power loss) leaves one behind, which the next write into that folder removes once its process
# is gone.
_TEMP_PREFIX = ".hwquant-"
_TEMP_NAME = re.compile(r"\.hwquant-(?:xquant-)?(\d+)-")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: a number no process can have
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(folder: Union[str, os.PathLike]) -> List[Path]:
    """Remove the temporary files and staging folders of hwquant writers that no longer run (never this
    process's own, which another thread may be writing); returns what was removed."""
    removed = []
    for entry in Path(folder).glob(f"{_TEMP_PREFIX}*"):
        match = _TEMP_NAME.match(entry.name)
        if match is None or int(match[1]) == os.getpid() or _process_alive(int(match[1])):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            elif entry.is_file():
                entry.unlink()
            else:
                continue
            removed.append(entry)
        except OSError:  # gone already, or not ours to remove: leave it
            pass
    return removed


def write_through_temporary(path: Union[str, os.PathLike], write: Callable[[str], None]) -> Path:
    """Call `write(temporary path)` (a sibling of `path` with its suffix, which writers such as Keras'
    require), then rename the result over `path`.

    Readers see either the old file or the complete new one; on any failure the temporary file is
    removed and `path` is left untouched; an OSError becomes a FileWriteError naming `path` (not the
    temporary file).
    """
    path = Path(path)
    rank = process_rank()
    if rank != 0:  # a multi-process run: every rank holds the same model, rank 0 writes it
        logging.getLogger("hwquant").info("rank %d: '%s' is written by rank 0 (one writer per multi-process run)",
                                          rank, path)
        return path
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write '{path}': folder '{folder}' does not exist")
    remove_stale_temporaries(folder)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-{path.name}.", suffix=path.suffix or ".tmp",
                                   dir=folder)
        os.close(fd)
        write(tmp)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise FileWriteError(path, e) from e
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write(path: Union[str, os.PathLike], data: Union[str, bytes]) -> Path:
    """Write `data` whole to `path` or not at all (write_through_temporary)."""
    def write(tmp: str) -> None:
        Path(tmp).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)

    return write_through_temporary(path, write)
