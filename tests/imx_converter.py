"""Sony's IMX500 converter in the opt-in tests: HWQUANT_IMXCONV names its `imxconv-pt`
(bash benchmarks/setup_imx500.sh installs it in .venv-imx)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

IMXCONV = os.environ.get("HWQUANT_IMXCONV")
needs_converter = pytest.mark.skipif(not IMXCONV, reason="opt-in: set HWQUANT_IMXCONV to the path of imxconv-pt "
                                                         "(bash benchmarks/setup_imx500.sh installs it in .venv-imx)")


def convert(onnx_path: Path, out: Path) -> dict:
    """Run the converter on `onnx_path` into `out` (asserting it succeeds); its memory report."""
    run = subprocess.run([IMXCONV, "-i", str(onnx_path), "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(next(out.glob("*MemoryReport.json")).read_text())["Memory Report"]
