"""The toolkit's logger ("hwquant"), and `set_log_folder` to also write it to a file."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from tqdm.auto import tqdm

LOGGER_NAME = "hwquant"
logger = logging.getLogger(LOGGER_NAME)

_file_handler: Optional[logging.Handler] = None


def set_log_folder(folder: Union[str, os.PathLike], level: int = logging.INFO) -> Path:
    """Write the toolkit's log (at `level` and above) to a new timestamped file in `folder`.

    The folder is created if needed; a later call moves logging to the new folder.
    Returns the log file's path.
    """
    global _file_handler
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"set_log_folder: cannot create log folder '{folder}': {e}") from e
    path = folder / f"hwquant_{time.strftime('%Y%m%d_%H%M%S')}_{os.getpid()}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)
    if _file_handler is not None:
        logger.removeHandler(_file_handler)
        _file_handler.close()
    logger.addHandler(handler)
    logger.setLevel(min(level, logger.level or logging.WARNING))
    _file_handler = handler
    return path


_progress_bars = True


def set_progress_bars(enabled: bool) -> None:
    """Show (default, on a terminal) or hide the progress bars of the long stages."""
    global _progress_bars
    _progress_bars = bool(enabled)


def progress(iterable: Iterable[Any], desc: str, total: Optional[int] = None) -> Iterable[Any]:
    """`iterable` with a progress bar (shown only on a terminal, and unless turned off)."""
    return tqdm(iterable, desc=desc, total=total, leave=False, disable=None if _progress_bars else True)
