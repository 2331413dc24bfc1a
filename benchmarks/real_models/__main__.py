"""`python -m benchmarks.real_models [name ...]` (or `python benchmarks/real_models [name ...]`): loads each real
model (all of REGISTRY by default), runs it and prints checks that its weights are the trained ones."""
import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/real_models`: import the package from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from benchmarks.real_models.checks import main  # noqa: E402

raise SystemExit(main(sys.argv[1:]))
