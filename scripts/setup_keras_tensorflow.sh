#!/usr/bin/env bash
# .venv-tf: hwquant[keras] on Keras' TensorFlow backend, without torch (hwquant[keras] needs neither
# torch nor, on the torch backend, TensorFlow), with what the TFLite and ONNX exports run on:
# ai-edge-litert (TensorFlow's own interpreter is deprecated and slow), tf2onnx, onnxruntime. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-tf
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import tensorflow, keras, hwquant, pytest, ai_edge_litert, tf2onnx, onnxruntime, click, matplotlib" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet "tensorflow-cpu>=2.19" "ai-edge-litert>=2.3" "tf2onnx>=1.17" \
        "onnxruntime>=1.20" -e ".[keras,report]" pytest
fi
