#!/usr/bin/env bash
# Ultralytics' IMX500 export with hwquant, on this machine: .venv-yolo holds hwquant, Ultralytics and Sony's
# edge-mdt packages; the IMX500 converter lives in .venv-imx (its pinned onnx / onnxruntime / numpy stay apart;
# Ultralytics finds imxconv-pt on PATH). A venv of its own because PyPI's torchvision (edge-mdt-cl imports it)
# does not load beside the CPU torch wheel and would break other packages' imports in .venv. Idempotent. Then:
#   PATH=$PWD/.venv-imx/bin:$PATH YOLO_AUTOINSTALL=False \
#       .venv-yolo/bin/python -m hwquant.mct_alias yolo export model=yolov8n.pt format=imx data=my_images.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-yolo
VPY=$VENV/bin/python
bash scripts/venv_cpu_torch.sh "$VENV"
"$VPY" -m pip install --quiet -e ".[torch,onnx]"
# --no-deps: a plain install of ultralytics pulls a CUDA torch over the CPU wheel, and edge-mdt-tpc depends on
# model-compression-toolkit, which hwquant stands in for (hwquant.mct_alias). Their light runtime needs are
# listed by hand; torchvision is the release made for torch 2.13.
if ! "$VPY" -c "import importlib.metadata as m; assert m.version('ultralytics') == '8.4.190'; import edgemdt_tpc, edgemdt_cl, cv2, psutil, skimage" 2>/dev/null; then
    "$VPY" -m pip install --quiet --no-deps ultralytics==8.4.190 ultralytics-thop==2.2.3 edge-mdt-tpc==1.3.0 \
        edge-mdt-cl==1.1.1 torchvision==0.28.0
    "$VPY" -m pip install --quiet "opencv-python-headless>=4.7" "matplotlib>=3.3" "pyyaml>=5.3.1" "requests>=2.23" \
        "psutil>=5.8" "pillow>=7.1.2" "onnxruntime-extensions>=0.15" scikit-image
fi
bash benchmarks/setup_imx500.sh
echo "Ultralytics IMX500 export ready: PATH=$PWD/.venv-imx/bin:\$PATH YOLO_AUTOINSTALL=False $VPY -m hwquant.mct_alias yolo export ..."
