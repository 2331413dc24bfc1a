"""File writing that never leaves a partial file behind."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Union


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


def write_through_temporary(path: Union[str, os.PathLike], write: Callable[[str], None]) -> Path:
    """Call `write(temporary path)` (a sibling of `path` with its suffix, which writers such as Keras'
    require), then rename the result over `path`.

    Readers see either the old file or the complete new one; on any failure the temporary file
    is removed and `path` is left untouched.
    """
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write '{path}': folder '{folder}' does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix or ".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write(path: Union[str, os.PathLike], data: Union[str, bytes]) -> Path:
    """Write `data` whole to `path` or not at all (write_through_temporary)."""
    return write_through_temporary(path, lambda tmp: Path(tmp).write_bytes(data.encode("utf-8") if isinstance(data, str) else data))
