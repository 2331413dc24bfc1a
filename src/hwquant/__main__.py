"""``python -m hwquant``: the command line (hwquant.cli)."""
from hwquant.cli import main

main(prog_name="hwquant")
