#!/usr/bin/env bash
# Create the virtualenv $1 (if missing) with the CPU torch wheel from /opt/wheels when it is there:
# PyPI's torch, asked for directly or by another package, pulls several GB of CUDA packages.
# Shared by scripts/setup.sh and the peer set-ups in benchmarks/. Idempotent.
set -euo pipefail
VENV=$1
PY=${PYTHON:-python3}
VPY=$VENV/bin/python
if [ ! -x "$VPY" ]; then
    "$PY" -m venv "$VENV"
fi
"$VPY" -m pip install --quiet --upgrade pip >/dev/null
if ! "$VPY" -c "import torch" 2>/dev/null; then
    wheel=$(ls /opt/wheels/torch-*.whl 2>/dev/null | head -n 1 || true)
    "$VPY" -m pip install --quiet "${wheel:-torch>=2.3}"
fi
