#!/usr/bin/env bash
# Create .venv-mct: Sony MCT 2.6.1, the peer our PTQ is measured against, in its own virtualenv
# (its pinned dependencies must not touch .venv). Idempotent: a complete venv is a fast no-op.
# ONNX Runtime, the other peer, lives in .venv (scripts/fetch_assets.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-mct
VPY=$VENV/bin/python
# CPU torch first, from the local wheel: otherwise MCT's dependency resolution pulls CUDA torch.
bash scripts/venv_cpu_torch.sh "$VENV"
if ! "$VPY" -c "import importlib.metadata as m; assert m.version('model-compression-toolkit') == '2.6.1'" 2>/dev/null; then
    "$VPY" -m pip install --quiet model-compression-toolkit==2.6.1
fi
# torchvision: --no-deps so it cannot replace the CPU torch. PyPI's wheel is built for CUDA torch;
# only its pure-Python part is usable, after declaring two operator schemas (see peer_mct.py).
if ! "$VPY" -c "import importlib.metadata as m; assert m.version('torchvision') == '0.28.0'" 2>/dev/null; then
    "$VPY" -m pip install --quiet --no-deps torchvision==0.28.0
fi
if ! "$VPY" -c "import PIL, numpy" 2>/dev/null; then
    "$VPY" -m pip install --quiet pillow numpy
fi
# MCT's ONNX export (the IMX500 converter benchmark converts its MCTQ files): torch.onnx.export,
# called as MCT calls it, takes torch 2.13's default exporter, which needs onnxscript.
if ! "$VPY" -c "import onnx, onnxscript" 2>/dev/null; then
    "$VPY" -m pip install --quiet onnx onnxscript
fi
# onnx2torch converts the real models shipped as ONNX (benchmarks/real_models/) for MCT too; --no-deps:
# its torch / torchvision / onnx pins must not move the ones above (torchvision is present here).
if ! "$VPY" -c "import importlib.metadata as m; assert m.version('onnx2torch') == '1.5.15'" 2>/dev/null; then
    "$VPY" -m pip install --quiet --no-deps onnx2torch==1.5.15
fi
echo "peer environment ready: $VENV"

# MCT 2.6.1's Keras path needs TensorFlow <= 2.15 (Keras 2): its own venv, for benchmarks/run_keras.py.
KVENV=.venv-mct-keras
if [ ! -x "$KVENV/bin/python" ]; then
    python3 -m venv "$KVENV"
fi
if ! "$KVENV/bin/python" -c "import importlib.metadata as m; assert m.version('model-compression-toolkit') == '2.6.1'; import tensorflow" 2>/dev/null; then
    "$KVENV/bin/python" -m pip install --quiet "tensorflow-cpu==2.15.1" "model-compression-toolkit==2.6.1"
fi
echo "Keras peer environment ready: $KVENV"
