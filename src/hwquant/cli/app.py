"""The `hwquant` command group; each command lives in its own module, registered here."""
from __future__ import annotations

import ctypes
import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="hwquant", prog_name="hwquant")
def main() -> None:
    """hwquant: hardware-aware quantization of PyTorch and Keras models for edge accelerators.

    Start with `hwquant quantize --help`; `hwquant tpc list` names the target platforms."""
    keep_freed_memory_for_reuse()


def keep_freed_memory_for_reuse() -> bool:
    """glibc hands every large block (one batch's activation, often 100 MB) back to the system when it is freed and
    takes it again, page by page, at the next allocation: on a CPU that costs more than the arithmetic (MobileNetV2
    runs 2x faster without it). The command's process keeps freed memory for reuse instead, as the environment
    variables MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 do for any Python process (docs/cli.md). The peak
    memory stays that of the largest step. Returns whether it applied (Linux with glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4  # glibc's mallopt parameters
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2 ** 31 - 1))
    except (OSError, AttributeError):  # not glibc (musl): its allocator keeps its own policy
        return False


def _register() -> None:
    from hwquant.cli import deploy, quantize, report, tpc
    main.add_command(quantize.quantize)
    main.add_command(deploy.export)
    main.add_command(deploy.check)
    main.add_command(report.report)
    main.add_command(tpc.tpc)


_register()
