"""Code written for Sony's MCT that real users run, against hwquant through hwquant.mct_alias: Ultralytics'
IMX500 export (ultralytics/utils/export/imx.py), Sony's edge-mdt-tpc (the IMX500 TPCs Ultralytics takes) and
edge-mdt-cl. Their sources are read from the installed packages (scripts/setup.sh puts them, without their
dependencies, in .cache/downstream): every `model_compression_toolkit` import they make and every `mct.<name>`
Ultralytics calls, with its keyword arguments, must resolve. The whole export, converter included, is the
opt-in test in test_ultralytics_imx.py."""
import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import hwquant
import hwquant.mct_alias as mct_alias
from hwquant.errors import HwquantError

ROOT = Path(__file__).resolve().parents[1]
DOWNSTREAM = ROOT / ".cache" / "downstream"
PACKAGES = ("ultralytics", "edgemdt_tpc", "edgemdt_cl")


@pytest.fixture(scope="module")
def downstream():
    assert (DOWNSTREAM / "ultralytics/utils/export/imx.py").exists(), \
        f"{DOWNSTREAM} lacks the downstream packages: run scripts/setup.sh"
    return DOWNSTREAM


@pytest.fixture
def alias():
    mct_alias.enable()
    yield
    mct_alias.disable()


def _sources(root: Path):
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _mct_imports(root: Path):
    """(file, module, imported names) of every import of model_compression_toolkit in the packages."""
    found = []
    for path, tree in _sources(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, a.name, ()) for a in node.names if a.name.split(".")[0] == mct_alias.ALIAS]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == mct_alias.ALIAS:
                found.append((path, node.module, tuple(a.name for a in node.names)))
    return found


def _chain(node: ast.AST):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _mct_uses(path: Path):
    """{`mct.a.b`: keyword names it is called with} for every attribute chain on the name `mct` in `path`."""
    uses = {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain and chain[0] == "mct":
                uses.setdefault(".".join(chain), set())
        if isinstance(node, ast.Call):
            chain = _chain(node.func)
            if chain and chain[0] == "mct":
                uses.setdefault(".".join(chain), set()).update(k.arg for k in node.keywords if k.arg)
    return uses


def test_every_model_compression_toolkit_import_of_the_downstream_packages_resolves(downstream, alias):
    imports = _mct_imports(downstream)
    modules = {module for _, module, _ in imports}
    # what the packages import today: the test would say so if they stopped (nothing checked by accident)
    assert {"model_compression_toolkit", "model_compression_toolkit.target_platform_capabilities.schema.v1",
            "model_compression_toolkit.target_platform_capabilities.schema.v2",
            "model_compression_toolkit.target_platform_capabilities.schema.mct_current_schema"} <= modules
    for path, module, names in imports:
        imported = importlib.import_module(module)
        assert imported.__name__.startswith("hwquant"), (path, module)
        missing = [n for n in names if not hasattr(imported, n)]
        assert not missing, f"{path.relative_to(downstream)}: {module} lacks {missing}"


def test_every_mct_name_ultralytics_calls_resolves_and_takes_its_arguments(downstream, alias):
    uses = _mct_uses(downstream / "ultralytics/utils/export/imx.py")
    assert {"mct.core.common.network_editors.NodeNameFilter", "mct.ptq.pytorch_post_training_quantization",
            "mct.gptq.pytorch_gradient_post_training_quantization", "mct.gptq.get_pytorch_gptq_config",
            "mct.exporter.pytorch_export_model", "mct.core.BitWidthConfig"} <= set(uses)
    mct = importlib.import_module(mct_alias.ALIAS)
    for chain, keywords in sorted(uses.items()):
        obj = mct
        for part in chain.split(".")[1:]:
            assert hasattr(obj, part), f"{chain}: hwquant has no '{part}' there"
            obj = getattr(obj, part)
        if keywords and callable(obj):
            parameters = inspect.signature(obj).parameters
            takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
            assert takes_any or keywords <= set(parameters), f"{chain} does not take {keywords - set(parameters)}"
    bit_cfg = mct.core.BitWidthConfig()  # Ultralytics' spelling, as it calls it
    bit_cfg.set_manual_activation_bit_width([mct.core.common.network_editors.NodeNameFilter("sub")], 16)
    assert mct.__version__ == hwquant.__version__


class _SiluNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.conv2(nn.functional.silu(self.conv1(x)))


def test_edge_mdt_tpc_builds_the_imx500_tpcs_on_hwquant_and_they_quantize_as_hwquants_own(downstream, alias,
                                                                                            monkeypatch):
    monkeypatch.syspath_prepend(str(downstream))
    from edgemdt_tpc import get_target_platform_capabilities as edge_tpc

    for version in ("1.0", "1.0_lut", "4.0", "4.1", "5.0"):
        tpc = edge_tpc(tpc_version=version)
        assert isinstance(tpc, hwquant.target_platform_capabilities.TargetPlatformCapabilities)
        assert tpc.SCHEMA_VERSION == (2 if version == "5.0" else 1)  # 5.0 is written with schema.v2
    torch.manual_seed(0)
    model = _SiluNet().eval()
    data = [[torch.randn(8, 3, 16, 16)] for _ in range(2)]
    outputs = []
    for tpc in (edge_tpc(tpc_version="4.0"), hwquant.get_target_platform_capabilities("4.0", "imx500")):
        q, _ = hwquant.ptq.pytorch_post_training_quantization(model, lambda: iter(data),
                                                             target_platform_capabilities=tpc)
        with torch.no_grad():
            outputs.append(q(data[0][0]))
    assert torch.equal(*outputs)


def test_the_alias_is_hwquant_module_for_module(alias):
    import model_compression_toolkit as mct
    import model_compression_toolkit.target_platform_capabilities.schema.v1 as v1

    assert mct is hwquant
    assert v1 is importlib.import_module("hwquant.target_platform_capabilities.schema.v1")
    assert v1.__spec__.name == "hwquant.target_platform_capabilities.schema.v1"  # its own spec, not the alias's
    with pytest.raises(ModuleNotFoundError, match="hwquant has no module 'hwquant.core.pytorch'"):
        importlib.import_module("model_compression_toolkit.core.pytorch.back2framework")


def test_the_alias_refuses_when_the_real_mct_is_already_imported(monkeypatch):
    fake = type(sys)("model_compression_toolkit")
    fake.__file__ = "/site-packages/model_compression_toolkit/__init__.py"
    monkeypatch.setitem(sys.modules, "model_compression_toolkit", fake)
    with pytest.raises(HwquantError, match="already imported in this process .*before anything imports it"):
        mct_alias.enable()
    assert not mct_alias.is_enabled()


def test_the_launcher_runs_a_program_with_the_alias_and_keeps_ultralytics_from_installing_mct(tmp_path):
    script = tmp_path / "user_code.py"
    script.write_text("import os, sys\nimport model_compression_toolkit as mct\n"
                      "print(mct.__name__, os.environ['YOLO_AUTOINSTALL'], sys.argv[1:])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("YOLO_AUTOINSTALL", "ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS")}
    run = subprocess.run([sys.executable, "-m", "hwquant.mct_alias", str(script), "a", "b"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == "hwquant False ['a', 'b']"
    assert "YOLO_AUTOINSTALL was not set: set to False for this run" in run.stderr
    missing = subprocess.run([sys.executable, "-m", "hwquant.mct_alias", "no-such-program"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "neither a file nor an installed console script" in missing.stderr
    # without the alias, the name is not taken: the real MCT (not installed here) is what it would find
    plain = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                            "print(u.find_spec('model_compression_toolkit'))"], capture_output=True, text=True,
                           timeout=120)
    assert plain.stdout.strip() == "None"
