"""The house rule, checked: framework code lives in hwquant/torch and hwquant/keras only; every other
module is framework-free; the public namespaces resolve framework names lazily (`import hwquant` loads
no framework, a missing framework is said with the extra to install); no import cycle anywhere."""
import ast
import graphlib
import pathlib
import subprocess
import sys
import textwrap

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "hwquant"
FRAMEWORKS = ("torch", "tensorflow", "keras")
FRAMEWORK_PACKAGES = ("torch", "keras")  # under src/hwquant: the only places framework code may live
PUBLIC = ["hwquant", "hwquant.core", "hwquant.tpc", "hwquant.target_platform_capabilities", "hwquant.core.quant_math",
          "hwquant.ptq", "hwquant.qat", "hwquant.gptq", "hwquant.exporter", "hwquant.trainable_infrastructure",
          "hwquant.wrapper"]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _framework_free_files():
    return [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in FRAMEWORK_PACKAGES]


def _type_checking_nodes(tree: ast.AST) -> set:
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for n in ast.walk(node))
    return hidden


def _imported(name: str, path: pathlib.Path):
    """Every module `name` imports (statements anywhere in it, importlib.import_module and lazy_table
    targets), resolved to hwquant's modules; TYPE_CHECKING blocks excluded."""
    tree = ast.parse(path.read_text())
    hidden = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            if callee.endswith("import_module") and node.args and isinstance(node.args[0], ast.Constant):
                yield node.args[0].value
            if callee == "lazy_table" and len(node.args) > 1 and isinstance(node.args[1], ast.Dict):
                yield from (v.value for v in node.args[1].values if isinstance(v, ast.Constant))
            if callee == "lazy_table" and len(node.args) > 1 and isinstance(node.args[1], ast.DictComp):
                yield from (n.value for n in ast.walk(node.args[1]) if isinstance(n, ast.Constant)
                            and isinstance(n.value, str) and n.value.startswith("hwquant."))


def _resolve(target: str) -> str:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target


def test_framework_free_modules_import_no_framework():
    files = _framework_free_files()
    assert len(files) > 60
    offenders = {str(f.relative_to(SRC)): m for f in files for m in _imported(_module_name(f), f)
                 if m.split(".")[0] in FRAMEWORKS}
    assert offenders == {}, "framework code outside hwquant/torch and hwquant/keras"


def test_no_import_cycle():
    graph = {}
    for name, path in MODULES.items():
        graph[name] = {r for t in _imported(name, path) if t.startswith("hwquant")
                       for r in [_resolve(t)] if r and r != name}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        pytest.fail(f"import cycle: {' -> '.join(e.args[1])}")


def test_a_cycle_is_found(monkeypatch):
    # the check above can fail: a made-up cycle through a lazy table is reported
    graph = {"hwquant.ptq": {"hwquant.torch.facade"}, "hwquant.torch.facade": {"hwquant.ptq"}}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()
    tree_edges = list(_imported("hwquant.ptq", MODULES["hwquant.ptq"]))
    assert "hwquant.torch.facade" in tree_edges and "hwquant.keras.facade" in tree_edges


@pytest.mark.parametrize("module", PUBLIC)
def test_importing_loads_no_framework(module):
    code = (f"import sys, {module}; "
            f"print([m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing {module} loaded {out}"


def test_importing_hwquant_loads_no_onnx():
    # onnx / onnxruntime load only when an export or an MCTQ session asks for them
    code = "import sys, hwquant; print([m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime')])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


_WITHOUT = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Block())
    import hwquant as mct
    try:
        {expr}
    except ImportError as e:
        print(type(e).__name__, "|", e)
""")


@pytest.mark.parametrize("blocked, expr, extra", [
    (("torch",), "mct.ptq.pytorch_post_training_quantization", "torch"),
    (("torch",), "mct.gptq.get_pytorch_gptq_config", "torch"),
    (("torch",), "mct.exporter.pytorch_export_model", "torch"),
    (("torch",), "mct.trainable_infrastructure.BasePytorchTrainableQuantizer", "torch"),
    (("keras", "tensorflow"), "mct.ptq.keras_post_training_quantization", "keras"),
    (("keras", "tensorflow"), "mct.core.keras_resource_utilization_data", "keras"),
])
def test_a_missing_framework_names_the_extra(blocked, expr, extra):
    out = subprocess.run([sys.executable, "-c", _WITHOUT.format(blocked=blocked, expr=expr)], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out.startswith("MissingFrameworkError |"), out
    assert f'pip install "hwquant[{extra}]"' in out and expr.replace("mct.", "hwquant.") in out


def test_unknown_public_name_is_an_attribute_error():
    import hwquant as mct
    with pytest.raises(AttributeError, match="pytorch_post_training_quantisation"):
        mct.ptq.pytorch_post_training_quantisation  # noqa: B018
    assert "pytorch_post_training_quantization" in dir(mct.ptq)
