#!/usr/bin/env bash
# CI: the package as a user gets it. Build the sdist and, from it, the wheel (python -m build); check that the
# wheel holds every file of src/hwquant (py.typed and any data file, not only the modules); install the wheel
# (not editable) with the torch and onnx extras into a fresh venv (the CPU torch wheel from /opt/wheels when
# there: scripts/venv_cpu_torch.sh); then, from a folder outside the source tree (src/ not importable), run
# `hwquant --version`, `hwquant tpc list`, and a small real quantization from files to an ONNX file and a
# saved model, checked with `hwquant check`. About a minute and a half, most of it installing torch.
# Usage: bash scripts/check_wheel.sh (after scripts/setup.sh, whose .venv has `build`: the lint extra)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hwquant-wheel-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
step() { echo "check_wheel: $*"; }

step "building the sdist and the wheel (from the sdist)"
.venv/bin/python -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
wheel=$(ls "$WORK"/dist/hwquant-*.whl)
sdist=$(ls "$WORK"/dist/hwquant-*.tar.gz)

step "checking the contents of $(basename "$wheel") and $(basename "$sdist")"
# every file of the package (the tracked ones; all files where git is not there) must be in both
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" ls-files src/hwquant >"$WORK/expected"
else
    find src/hwquant -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | sort >"$WORK/expected"
fi
.venv/bin/python - "$wheel" "$sdist" "$WORK/expected" <<'EOF'
import sys, tarfile, zipfile
wheel, sdist, expected = sys.argv[1:]
want = {line.strip()[len("src/"):] for line in open(expected) if line.strip()}
assert "hwquant/py.typed" in want, "src/hwquant/py.typed is missing from the source tree"
in_wheel = set(zipfile.ZipFile(wheel).namelist())
with tarfile.open(sdist) as t:
    in_sdist = {n.split("/", 2)[2] for n in t.getnames() if n.count("/") >= 2 and n.split("/", 2)[1] == "src"}
problems = [f"the wheel lacks {sorted(want - in_wheel)[:20]}"] if want - in_wheel else []
problems += [f"the sdist lacks {sorted(want - in_sdist)[:20]}"] if want - in_sdist else []
stray = sorted(n for n in in_wheel if not n.startswith(("hwquant/", "hwquant-")))
problems += [f"the wheel holds files outside the package: {stray[:20]}"] if stray else []
if problems:
    sys.exit("check_wheel: " + "; ".join(problems))
print(f"check_wheel: {len(want)} package files in the wheel and the sdist, py.typed among them")
EOF

step "installing the wheel with [torch,onnx] into a fresh venv"
PYTHON=${PYTHON:-python3.11} bash scripts/venv_cpu_torch.sh "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet "${wheel}[torch,onnx]"

# a user's folder: a model file and calibration data, nothing of the source tree
mkdir "$WORK/user"
cd "$WORK/user"
export PATH="$WORK/venv/bin:$PATH" PYTHONPATH=""
cat >my_model.py <<'EOF'
import torch
from torch import nn


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU6(), nn.Conv2d(8, 16, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5)).eval()
EOF
python -c "import numpy as np; np.savez('calib.npz', np.random.default_rng(0).normal(size=(32, 3, 16, 16)).astype('float32'))"
where=$(python -c "import hwquant, os; print(os.path.dirname(hwquant.__file__))")
case "$where" in
    "$WORK/venv/"*) ;;
    *) echo "check_wheel: hwquant was imported from $where, not from the installed wheel"; exit 1 ;;
esac
python -c "import importlib.metadata as m, sys; d = m.distribution('hwquant'); \
sys.exit('check_wheel: hwquant is installed editable' if d.read_text('direct_url.json') and 'editable' in d.read_text('direct_url.json') else 0)"

step "running hwquant from the fresh venv in $PWD"
hwquant --version
hwquant tpc list >tpcs.txt
grep -q "imx500:4.0" tpcs.txt || { cat tpcs.txt; echo "check_wheel: 'hwquant tpc list' lacks imx500:4.0"; exit 1; }
hwquant tpc export imx500:4.0 tpc.json >/dev/null
hwquant tpc check tpc.json >/dev/null
hwquant quantize my_model.py:small_cnn --data calib.npz --tpc tpc.json --out q.onnx -q
hwquant quantize my_model.py:small_cnn --data calib.npz --tpc imx500:4.0 --out q.pt -q
for f in q.onnx q.pt; do
    [ -s "$f" ] || { echo "check_wheel: hwquant quantize did not write $f"; exit 1; }
done
hwquant check q.onnx q.pt --data calib.npz --no-converter
step "importing MCT's module paths (the table of hwquant/mct_paths.py, no files) from the wheel"
python - <<'EOF'
import importlib, pkgutil
import hwquant
from hwquant import mct_alias, mct_paths
made = [importlib.import_module(m) for m in mct_paths.MODULES]
listed = {m.name for m in pkgutil.walk_packages(hwquant.__path__, "hwquant.")}
assert set(mct_paths.MODULES) <= listed, sorted(set(mct_paths.MODULES) - listed)
mct_alias.enable()
from model_compression_toolkit.core.common.network_editors import NodeNameFilter
from model_compression_toolkit.target_platform_capabilities.schema.mct_current_schema import TargetPlatformCapabilities
from model_compression_toolkit.qat.keras.quantizer.lsq.symmetric_lsq import LSQWeightQATQuantizer  # noqa (no keras: a stand-in)
assert NodeNameFilter is hwquant.core.configuration.network_editor.NodeNameFilter
assert TargetPlatformCapabilities is hwquant.tpc.TargetPlatformCapabilities
print(f"check_wheel: {len(made)} modules of MCT's paths import from the wheel, pkgutil lists them")
EOF
step "the installed wheel works"
