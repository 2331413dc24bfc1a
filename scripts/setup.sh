#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv: idempotent, offline-friendly.
# Installs the CPU torch wheel from /opt/wheels when present (PyPI's torch pulls GBs of CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv_cpu_torch.sh .venv
VPY=.venv/bin/python
"$VPY" -m pip install --quiet -e ".[torch,onnx,keras,test,lint,report,docs]"
# onnx2torch (the tests' and benchmarks' converter of the ONNX files packages ship) without its declared
# torchvision requirement, which would replace the CPU torch; benchmarks/real_models/onnx_convert.py loads it.
"$VPY" -m pip install --quiet --no-deps "onnx2torch==1.5.15"
# The code of the packages that call hwquant as model_compression_toolkit (Ultralytics' IMX500 export,
# Sony's edge-mdt-tpc and edge-mdt-cl), kept out of .venv (--no-deps --target): the tests read their
# sources and import edge-mdt-tpc's TPC modules against hwquant (tests/test_downstream_mct_users.py).
DOWNSTREAM=.cache/downstream
if [ ! -f "$DOWNSTREAM/.complete-8.4.190-1.3.0-1.1.1" ]; then
    rm -rf "$DOWNSTREAM"
    "$VPY" -m pip install --quiet --no-deps --target "$DOWNSTREAM" \
        ultralytics==8.4.190 edge-mdt-tpc==1.3.0 edge-mdt-cl==1.1.1
    touch "$DOWNSTREAM/.complete-8.4.190-1.3.0-1.1.1"
fi
# MTCNN's trained weights (facenet-pytorch, 2 MB, --no-deps --target .cache/assets/real): the quick
# real-model fidelity check in the test suite (tests/test_real_models_quick.py).
bash benchmarks/fetch_real_models.sh facenet-pytorch
