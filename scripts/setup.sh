#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv: idempotent, offline-friendly.
# Installs the CPU torch wheel from /opt/wheels when present (PyPI's torch pulls GBs of CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install --quiet --upgrade pip >/dev/null
if ! "$VPY" -c "import torch" 2>/dev/null; then
    wheel=$(ls /opt/wheels/torch-*.whl 2>/dev/null | head -n 1 || true)
    if [ -n "$wheel" ]; then
        "$VPY" -m pip install --quiet "$wheel"
    else
        "$VPY" -m pip install --quiet "torch>=2.3"
    fi
fi
"$VPY" -m pip install --quiet -e ".[torch,onnx,test]"
