"""The `hwquant` command group; each command lives in its own module, registered here."""
from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="hwquant", prog_name="hwquant")
def main() -> None:
    """hwquant: hardware-aware quantization of PyTorch and Keras models for edge accelerators.

    Start with `hwquant quantize --help`; `hwquant tpc list` names the target platforms."""


def _register() -> None:
    from hwquant.cli import deploy, quantize, report, tpc
    main.add_command(quantize.quantize)
    main.add_command(deploy.export)
    main.add_command(deploy.check)
    main.add_command(report.report)
    main.add_command(tpc.tpc)


_register()
