"""File writing that never leaves a partial file behind."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Union


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


def atomic_write(path: Union[str, os.PathLike], data: Union[str, bytes]) -> Path:
    """Write `data` to a temporary sibling of `path`, then rename it over `path`.

    Readers see either the old file or the complete new one; on any failure the temporary file
    is removed and `path` is left untouched.
    """
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write '{path}': folder '{folder}' does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
