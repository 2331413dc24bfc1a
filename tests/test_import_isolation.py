"""The house rule, checked: framework code lives in hwquant/torch and hwquant/keras only; every other
module is framework-free; the public namespaces resolve framework names lazily (`import hwquant` loads
no framework, a missing framework is said with the extra to install); no import cycle anywhere, between
modules (the table of MCT's module paths included) or between hwquant's top-level packages."""
import ast
import graphlib
import importlib.util
import json
import pathlib
import runpy
import subprocess
import sys
import textwrap

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "hwquant"
FRAMEWORKS = ("torch", "tensorflow", "keras")
FRAMEWORK_PACKAGES = ("torch", "keras")  # under src/hwquant: the only places framework code may live
PUBLIC = ["hwquant", "hwquant.core", "hwquant.tpc", "hwquant.target_platform_capabilities", "hwquant.core.numerics.quant_math",
          "hwquant.ptq", "hwquant.qat", "hwquant.gptq", "hwquant.exporter", "hwquant.trainable_infrastructure",
          "hwquant.wrapper"]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}
# the table of MCT's module paths, {module: {name: home}} (hwquant/mct_paths.py, which imports nothing): its
# modules without a file are made on import; each name resolves to its home on first use
TABLE = runpy.run_path(str(SRC / "mct_paths.py"))["MODULES"]
KNOWN = set(MODULES) | set(TABLE)  # every importable module of hwquant


def _homes(module: str) -> set:
    """The modules the table's names of `module` resolve to (as a lazy table's targets)."""
    return {home.partition(":")[0] for home in TABLE.get(module, {}).values()}


def _framework_free_files():
    return [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in FRAMEWORK_PACKAGES]


def _type_checking_nodes(tree: ast.AST) -> set:
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for n in ast.walk(node))
    return hidden


def _imported(name: str, path: pathlib.Path, tables: bool = True):
    """Every module `name` imports (statements anywhere in it, importlib.import_module and, with `tables`,
    lazy_table targets), resolved to hwquant's modules; TYPE_CHECKING blocks excluded."""
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
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in KNOWN else base
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            if callee.endswith("import_module") and node.args and isinstance(node.args[0], ast.Constant):
                yield node.args[0].value
            if callee == "lazy_table" and tables and len(node.args) > 1 and isinstance(node.args[1], ast.Dict):
                yield from (v.value for v in node.args[1].values if isinstance(v, ast.Constant))
            if callee == "lazy_table" and tables and len(node.args) > 1 and isinstance(node.args[1], ast.DictComp):
                yield from (n.value for n in ast.walk(node.args[1]) if isinstance(n, ast.Constant)
                            and isinstance(n.value, str) and n.value.startswith("hwquant."))


def _resolve(target: str) -> str:
    while target and target not in KNOWN:
        target = target.rpartition(".")[0]
    return target


def _module_graph() -> dict:
    """{module: the modules it imports}: statements, import_module calls, lazy-table targets, and for the
    table's modules (with a file or without) the homes of their names."""
    graph = {}
    for name in sorted(KNOWN):
        targets = set(_imported(name, MODULES[name])) if name in MODULES else set()
        graph[name] = {r for t in targets | _homes(name) if t.startswith("hwquant")
                       for r in [_resolve(t)] if r and r != name}
    return graph


def test_framework_free_modules_import_no_framework():
    files = _framework_free_files()
    assert len(files) > 60
    offenders = {str(f.relative_to(SRC)): m for f in files for m in _imported(_module_name(f), f)
                 if m.split(".")[0] in FRAMEWORKS}
    assert offenders == {}, "framework code outside hwquant/torch and hwquant/keras"


def test_the_table_of_module_paths_is_framework_free_and_its_homes_exist():
    """Every home of hwquant/mct_paths.py is a module of hwquant (a framework's own modules are reached
    through hwquant.torch / hwquant.keras, resolved on first use); every table module's parent is a package
    of hwquant or of the table; every module of the table without a file has none of its own."""
    assert len(TABLE) > 45
    homes = {module: _homes(module) for module in TABLE}
    assert {m: sorted(h - KNOWN) for m, h in homes.items() if h - KNOWN} == {}
    assert not any(h.split(".")[0] in FRAMEWORKS for hs in homes.values() for h in hs)
    assert all(h.startswith("hwquant.") for hs in homes.values() for h in hs)
    parents = {m.rpartition(".")[0] for m in TABLE}
    assert parents <= KNOWN and all(p in TABLE or MODULES[p].name == "__init__.py" for p in parents)
    with_file = {m for m in TABLE if m in MODULES}
    assert with_file == {"hwquant.target_platform_capabilities", "hwquant.target_platform_capabilities.schema"}
    assert all("_served(__name__" in MODULES[m].read_text() for m in with_file)  # their names: the table's


def test_importing_every_module_of_the_table_loads_no_framework():
    code = ("import sys, importlib, runpy; "
            f"[importlib.import_module(m) for m in runpy.run_path({str(SRC / 'mct_paths.py')!r})['MODULES']]; "
            f"print([m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing the table's modules loaded {out}"


def test_no_import_cycle():
    graph = _module_graph()
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        pytest.fail(f"import cycle: {' -> '.join(e.args[1])}")


def _package(module: str) -> str:
    """The top-level package (or module) of hwquant holding `module`: hwquant.core.graph.model_graph -> core,
    hwquant.fileio -> fileio; hwquant itself -> ''."""
    return module.split(".")[1] if "." in module else ""


def _package_graph() -> dict:
    """{top-level package: the top-level packages it imports}, through import statements anywhere (in
    functions too) and import_module calls. The public namespaces' lazy tables are left out: they are the
    one way up by design (mct.qat's Keras names resolve to hwquant.keras.qat, which imports hwquant.qat.config),
    resolved on first use, after both sides are loaded."""
    graph: dict = {}
    for name, path in MODULES.items():
        here = _package(name)
        if here:
            targets = {_package(r) for t in _imported(name, path, tables=False) if t.startswith("hwquant")
                       for r in [_resolve(t)] if r}
            graph.setdefault(here, set()).update(targets - {here, ""})
    return graph


def test_no_package_cycle():
    """hwquant's top-level packages and modules (core, tpc, fileio, gptq, qat, exporter, xquant, ...) form
    layers: none imports, through any chain of the others, from itself (core -> tpc -> fileio -> core was
    one: fileio asked core who writes files; process_rank.py is now a leaf that both ask)."""
    graph = _package_graph()
    assert {"core", "tpc", "fileio", "torch", "keras", "process_rank"} <= set(graph)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        cycle = e.args[1][::-1]  # (graphlib lists each node before the ones that import it)
        edges = [f"{a} -> {b}: " + ", ".join(sorted({
            f"{m} imports {r}" for m, p in MODULES.items() if _package(m) == a
            for t in _imported(m, p, tables=False) for r in [_resolve(t)] if r and _package(r) == b})[:3])
            for a, b in zip(cycle, cycle[1:])]
        pytest.fail("package cycle: " + " -> ".join(cycle) + "\n" + "\n".join(edges))


def test_a_package_cycle_is_found():
    # the graph holds the edges the check needs: function-level imports, not lazy tables
    graph = _package_graph()
    assert "fileio" in graph["tpc"] and "core" in graph["torch"] and "torch" not in graph["qat"]
    assert graph["process_rank"] == set() and "core" not in graph["fileio"]
    assert "exporter" in graph["keras"]  # (keras/command_line.py imports hwquant.exporter inside a function)
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({**graph, "process_rank": {"core"}}).prepare()


def test_a_cycle_is_found(monkeypatch):
    # the check above can fail: a made-up cycle through a lazy table is reported
    graph = {"hwquant.ptq": {"hwquant.torch.facade"}, "hwquant.torch.facade": {"hwquant.ptq"}}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()
    tree_edges = list(_imported("hwquant.pruning", MODULES["hwquant.pruning"]))
    assert "hwquant.torch.pruning" in tree_edges and "hwquant.keras.pruning" in tree_edges
    # ... and through the table of module paths: a table module leads to its names' homes, a module
    # importing a table module to it
    edges = _module_graph()
    assert {"hwquant.torch.facade", "hwquant.keras.facade"} <= edges["hwquant.ptq"]  # (a lazy table)
    assert "hwquant.ptq" in edges["hwquant.wrapper.mct_wrapper"]
    assert {"hwquant.keras.xquant"} == edges["hwquant.xquant.keras.facade_xquant_report"]
    assert "hwquant.core.configuration.network_editor" in edges["hwquant.core.common.network_editors"]
    assert "hwquant.tpc" in edges["hwquant.target_platform_capabilities"]  # (a table module with a file)
    assert "hwquant.target_platform_capabilities.schema.mct_current_schema" in \
        edges["hwquant.target_platform_capabilities.schema.v1"]
    monkeypatch.setitem(TABLE, "hwquant.tpc.enums", {"X": "hwquant.target_platform"})  # enums -> ... -> enums
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(_module_graph()).prepare()


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


_BLOCK = """
import importlib.util, sys
class Block:  # the blocked packages are not installed, as far as this process can tell
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
_find_spec = importlib.util.find_spec
def find_spec(name, package=None):  # (mct-quantizers asks whether a framework is installed this way)
    return None if name.split(".")[0] in {blocked!r} else _find_spec(name, package)
importlib.util.find_spec = find_spec
"""

_WITHOUT = _BLOCK + textwrap.dedent("""
    import hwquant as mct
    name = {expr}
    assert hasattr(eval("{parent}"), "{leaf}")
    try:
        name()
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
    (("keras", "tensorflow"), "mct.keras_load_quantized_model", "keras"),
])
def test_a_missing_framework_names_the_extra_when_called(blocked, expr, extra):
    parent, _, leaf = expr.rpartition(".")
    code = _WITHOUT.format(blocked=blocked, expr=expr, parent=parent, leaf=leaf)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.startswith("MissingFrameworkError |"), out
    assert f'pip install "hwquant[{extra}]"' in out and expr.replace("mct.", "hwquant.") in out


_EVERY_TABLE = _BLOCK + textwrap.dedent("""
    import importlib, json, pkgutil
    import hwquant
    from hwquant import lazy
    for found in pkgutil.walk_packages(hwquant.__path__, "hwquant."):  # every namespace and its table
        if not found.name.startswith(("hwquant.torch", "hwquant.keras", "hwquant.cli", "hwquant.__main__")):
            importlib.import_module(found.name)
    rows = []
    for namespace, table in sorted(lazy.TABLES.items()):
        module = importlib.import_module(namespace)
        for name, defined_in in sorted(table.items()):
            obj = getattr(module, name)
            row = dict(namespace=namespace, name=name, defined_in=defined_in, has=hasattr(module, name),
                       stand_in=lazy.is_stand_in(obj), callable=callable(obj), same=getattr(module, name) is obj,
                       own_name=getattr(obj, "__name__", None), doc=getattr(obj, "__doc__", None) or "")
            if row["stand_in"]:
                try:
                    obj()
                except lazy.MissingFrameworkError as e:
                    row["error"] = str(e)
            rows.append(row)
    print(json.dumps(rows))
""")


def _every_public_name(blocked):
    out = subprocess.run([sys.executable, "-c", _EVERY_TABLE.format(blocked=blocked)], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    return json.loads(out)


@pytest.mark.parametrize("blocked, package, extra", [(("torch",), "hwquant.torch", "torch"),
                                                     (("keras", "tensorflow"), "hwquant.keras", "keras")])
def test_every_public_name_resolves_without_its_framework(blocked, package, extra):
    """Without a framework, each of its public names (every lazy table) still resolves, as MCT's do in a
    one-framework install: a stand-in of the same name, documented, whose call names the extra."""
    rows = _every_public_name(blocked)
    assert len(rows) > 70 and all(r["has"] and r["same"] and r["callable"] for r in rows)
    mine = [r for r in rows if r["defined_in"].startswith(package + ".")]
    assert len(mine) > 15
    for r in mine:
        where = f"{r['namespace']}.{r['name']}"
        assert r["stand_in"] and r["own_name"] == r["name"], where
        assert f'pip install "hwquant[{extra}]"' in r["doc"], where
        assert r["error"].startswith(f"{where} needs ") and f'pip install "hwquant[{extra}]"' in r["error"], where
    # the framework-free names are themselves (the Keras ones need torch on Keras' torch backend)
    assert not any(r["stand_in"] for r in rows if not r["defined_in"].startswith(("hwquant.torch.", "hwquant.keras.")))
    if extra == "keras" and importlib.util.find_spec("torch") is not None:  # a torch-only install: the real ones
        assert not any(r["stand_in"] for r in rows if r["defined_in"].startswith("hwquant.torch."))
    if extra == "torch" and importlib.util.find_spec("tensorflow") is not None:  # a Keras-only install (TensorFlow)
        assert not any(r["stand_in"] for r in rows if r["defined_in"].startswith("hwquant.keras."))


_MCT_MODULE = _BLOCK + textwrap.dedent("""
    import hwquant.mct_alias
    hwquant.mct_alias.enable()
    import model_compression_toolkit as mct
    from model_compression_toolkit.ptq import keras_post_training_quantization, pytorch_post_training_quantization
    from model_compression_toolkit.gptq import get_keras_gptq_config, get_pytorch_gptq_config
    from model_compression_toolkit.exporter import keras_export_model, pytorch_export_model
    from model_compression_toolkit.trainable_infrastructure import BaseKerasTrainableQuantizer
    import hwquant
    names = ["ptq.keras_post_training_quantization", "exporter.keras_export_model",
             "gptq.keras_gradient_post_training_quantization", "gptq.get_keras_gptq_config",
             "core.keras_resource_utilization_data", "qat.keras_quantization_aware_training_init_experimental",
             "qat.keras_quantization_aware_training_finalize_experimental", "pruning.keras_pruning_experimental",
             "data_generation.get_keras_data_generation_config", "data_generation.keras_data_generation_experimental",
             "xquant.xquant_report_keras_experimental", "xquant.xquant_report_troubleshoot_keras_experimental",
             "keras_load_quantized_model", "exporter.is_keras_layer_exportable",
             "trainable_infrastructure.BaseKerasTrainableQuantizer"]
    def get(root, path):
        for part in path.split("."):
            root = getattr(root, part)
        return root
    assert all(get(mct, n) is get(hwquant, n) for n in names)
    assert hasattr(mct.ptq, "keras_post_training_quantization") and hasattr(mct.ptq, "pytorch_post_training_quantization")
    class MyQuantizer(BaseKerasTrainableQuantizer):  # subclassing at import time works, as in MCT
        pass
    try:
        get_keras_gptq_config(n_epochs=5)
    except ImportError as e:
        print(type(e).__name__, "|", e)
""")


def test_a_module_importing_both_frameworks_names_imports_with_one():
    """MCT user code that imports the names of both frameworks imports fine with Keras missing, through
    the model_compression_toolkit alias too; the call of a Keras name says which extra to install."""
    out = subprocess.run([sys.executable, "-c", _MCT_MODULE.format(blocked=("keras", "tensorflow"))],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("MissingFrameworkError | hwquant.gptq.get_keras_gptq_config needs keras")
    assert 'pip install "hwquant[keras]"' in out.stdout


def test_a_stand_in_class_is_a_class():
    from hwquant import lazy
    cls = lazy.stand_in("hwquant.example", "ExampleQuantizer", "torch")
    assert isinstance(cls, type) and cls.__name__ == "ExampleQuantizer" and cls is lazy.stand_in(
        "hwquant.example", "ExampleQuantizer", "torch")

    class Mine(cls):
        pass
    with pytest.raises(lazy.MissingFrameworkError, match=r'hwquant.example.ExampleQuantizer needs torch.*hwquant\[torch\]'):
        Mine()
    error = lazy.stand_in("hwquant.example", "ExampleError", "keras")
    assert issubclass(error, Exception)
    with pytest.raises(ValueError):  # usable in an except clause
        try:
            raise ValueError
        except error:
            pass


def test_unknown_public_name_is_an_attribute_error():
    import hwquant as mct
    with pytest.raises(AttributeError, match="pytorch_post_training_quantisation"):
        mct.ptq.pytorch_post_training_quantisation  # noqa: B018
    assert "pytorch_post_training_quantization" in dir(mct.ptq)
