#!/usr/bin/env bash
# The Keras tests again on Keras' TensorFlow backend, in .venv-tf (TensorFlow, no torch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_keras_tensorflow.sh
KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=2 .venv-tf/bin/python -m pytest -q -p no:cacheprovider \
    tests/test_keras_capture.py tests/test_keras_attach.py tests/test_keras_ptq.py tests/test_keras_export.py \
    tests/test_keras_quantizers.py tests/test_pass_templates.py \
    tests/test_facades_both_frameworks.py tests/test_adapter_conformance.py tests/test_keras_tflite_batch.py \
    tests/test_bounded_outputs.py tests/test_keras_mct_reads.py tests/test_mct_wrapper_keras.py \
    tests/test_keras_qat.py tests/test_keras_gptq.py tests/test_xquant.py tests/test_cli.py tests/test_import_isolation.py tests/test_pruning_sections.py tests/test_pruning.py tests/test_data_generation_config.py tests/test_data_generation_keras.py tests/test_data_generation_keras_models.py tests/test_cli_framework_output.py tests/test_fileio.py
