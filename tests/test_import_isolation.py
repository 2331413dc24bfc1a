"""core/ and the TPC package never import torch, tensorflow or keras (DESIGN principle 3)."""
import ast
import pathlib
import subprocess
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "hwquant"
FRAMEWORKS = ("torch", "tensorflow", "keras")
FRAMEWORK_FREE = ["core", "tpc", "target_platform_capabilities", "trainable_infrastructure/config.py",
                  "trainable_infrastructure/common.py", "trainable_infrastructure/node_configs.py",
                  "trainable_infrastructure/__init__.py", "qat/__init__.py", "qat/config.py",
                  "gptq/__init__.py", "gptq/config.py",
                  "target_platform.py", "constants.py", "errors.py", "fileio.py", "logger.py",
                  "exporter/formats.py", "exporter/quantizer_spec.py", "exporter/onnx_graph.py",
                  "exporter/onnx_lowering.py", "exporter/onnx_int8.py", "exporter/onnx_runtime.py"]


@pytest.mark.parametrize("module", ["hwquant", "hwquant.core", "hwquant.tpc", "hwquant.target_platform_capabilities",
                                    "hwquant.core.quant_math", "hwquant.qat", "hwquant.trainable_infrastructure",
                                    "hwquant.gptq"])
def test_importing_loads_no_framework(module):
    code = (f"import sys, {module}; "
            f"print([m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing {module} loaded {out}"


def test_importing_hwquant_loads_no_onnx():
    # onnx / onnxruntime load only when an export or an MCTQ session asks for them
    code = "import sys, hwquant; print([m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime')])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_framework_free_sources_have_no_framework_import_statements():
    files = [f for entry in FRAMEWORK_FREE for f in ((SRC / entry).rglob("*.py") if (SRC / entry).is_dir() else [SRC / entry])]
    assert len(files) > 10
    offenders = {str(f.relative_to(SRC)): m for f in files for m in _imports(f) if m.split(".")[0] in FRAMEWORKS}
    assert offenders == {}
