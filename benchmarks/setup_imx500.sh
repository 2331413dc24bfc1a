#!/usr/bin/env bash
# Create .venv-imx: Sony's IMX500 converter (imxconv-pt 3.19.2: uni-pytorch front end, sdspconv back
# end) in its own virtualenv, so its pinned onnx / onnxruntime / numpy never touch .venv. The back
# end is Java: a JRE 17 is installed from Debian when none is on the PATH. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-imx
VPY=$VENV/bin/python

if ! command -v java >/dev/null 2>&1; then
    apt-get update >/dev/null && apt-get install -y --no-install-recommends openjdk-17-jre-headless >/dev/null
fi
# CPU torch first, from the local wheel: uni-pytorch depends on torch, and PyPI's pulls CUDA.
bash scripts/venv_cpu_torch.sh "$VENV"
if ! "$VPY" -c "import importlib.metadata as m; assert m.version('imx500-converter') == '3.19.2'" 2>/dev/null; then
    "$VPY" -m pip install --quiet "imx500-converter[pt]==3.19.2"
fi
echo "IMX500 converter ready: $VENV/bin/imxconv-pt"
