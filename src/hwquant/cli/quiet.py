"""The frameworks' own chatter kept off the command line: TensorFlow's banners when it is imported (oneDNN, the CPU
instructions it was built without), its C++ log lines (the TFLite converter's 'Ignored output_format', SavedModel
loading) and its Python warnings. A command shows them with --verbose, or where HWQUANT_DEBUG is set; errors
always come through.

- TF_CPP_MIN_LOG_LEVEL=2 (unless already set) before TensorFlow is imported: its C++ code logs errors only.
- TensorFlow's Python logger at ERROR; the deprecation and future warnings of the frameworks' own modules ignored.
- What C++ code writes past TF_CPP_MIN_LOG_LEVEL (the banners of TensorFlow's import, before its logging is set up;
  the TFLite interpreter's info lines) is filtered: the import, an export, a run of an exported file run with the
  process's stderr (file descriptor 2) in a temporary file, whose lines are then written to stderr but for the
  chatter (what else was written, an error included, still shows, after that step)."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings
from typing import Any, Callable, Iterator

import click

# the lines TensorFlow's C++ code writes at info and warning level (absl / glog format: I0000 00:00:...  123
# file.cc:45] ...), absl's note that its logging is not set up yet, the second line of the CPU-feature banner, and
# the TFLite interpreter's info lines
NOISE = (re.compile(r"^[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+\S+:\d+\] "),
         re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"),
         re.compile(r"^To enable the following instructions: .*, in other operations, rebuild TensorFlow with the "
                    r"appropriate compiler flags\.$"),
         re.compile(r"^INFO: "))  # TFLite's own info lines ('Created TensorFlow Lite XNNPACK delegate for CPU.')

# where the Python warnings come from that are TensorFlow's business, not the user's (Keras' export through tf2onnx
# warns of a numpy attribute it reads)
FRAMEWORK_MODULES = r"(keras|tensorflow|tf2onnx|tf_keras|ai_edge_litert|absl)(\.|$)"

_quiet = False  # set for the running command by framework_output_option


def chatter_wanted(verbose: bool) -> bool:
    return verbose or bool(os.environ.get("HWQUANT_DEBUG"))


def configure(verbose: bool) -> None:
    """Before a command runs (and before it imports a framework): quiet the frameworks unless asked not to."""
    global _quiet
    _quiet = not chatter_wanted(verbose)
    if not _quiet:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # (a value the user set is theirs)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):  # about the libraries' own code
        warnings.filterwarnings("ignore", category=category, module=FRAMEWORK_MODULES)


def is_noise(line: str) -> bool:
    return any(p.match(line.rstrip("\r\n")) for p in NOISE)


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Around a framework's C++ code that writes to stderr itself (an import, a converter, an interpreter): the
    process's stderr (file descriptor 2) held in a temporary file, then its lines written to stderr but for the
    chatter (NOISE), in quiet mode; nothing done in verbose mode or where stderr is no file descriptor. (A crash
    of the process itself inside loses what was held: run with --verbose to see it.)"""
    if not _quiet:
        yield
        return
    _flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            _flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(keepends=True)
                    if not is_noise(line)]
            if kept:
                sys.stderr.write("".join(kept))
                _flush()


@contextlib.contextmanager
def framework_import() -> Iterator[None]:
    """Around code that may import TensorFlow for the first time (a framework adapter, the user's model module):
    filtered_stderr, where TensorFlow is installed and not imported yet."""
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        yield
        return
    with filtered_stderr():
        yield


def _flush() -> None:
    with contextlib.suppress(Exception):
        sys.stderr.flush()


def framework_output_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """A command's -v / --verbose flag: the frameworks' own log lines shown (also where HWQUANT_DEBUG is set)."""
    @functools.wraps(command)
    def run(*args: Any, verbose: bool = False, **kwargs: Any) -> Any:
        configure(verbose)
        return command(*args, **kwargs)

    return click.option("-v", "--verbose", is_flag=True,
                        help="Show the frameworks' own log lines too (TensorFlow's banners, warnings and converter "
                             "logs; also shown where the environment variable HWQUANT_DEBUG is set).")(run)
