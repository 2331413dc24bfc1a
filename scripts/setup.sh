#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv: idempotent, offline-friendly.
# Installs the CPU torch wheel from /opt/wheels when present (PyPI's torch pulls GBs of CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv_cpu_torch.sh .venv
VPY=.venv/bin/python
"$VPY" -m pip install --quiet -e ".[torch,onnx,keras,test]"
