#!/usr/bin/env bash
# The Keras tests again on Keras' TensorFlow backend, in a venv with TensorFlow and without torch
# (hwquant[keras] needs neither torch nor, on the torch backend, TensorFlow).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-tf
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import tensorflow, keras, hwquant, pytest, ai_edge_litert, tf2onnx, onnxruntime" 2>/dev/null; then
    # ai-edge-litert runs the TFLite files (TensorFlow's own interpreter is deprecated and slow)
    "$VENV/bin/python" -m pip install --quiet "tensorflow-cpu>=2.19" "ai-edge-litert>=2.3" "tf2onnx>=1.17" "onnxruntime>=1.20" -e ".[keras]" pytest
fi
KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    tests/test_keras_capture.py tests/test_keras_attach.py tests/test_keras_ptq.py tests/test_keras_export.py \
    tests/test_keras_quantizers.py
