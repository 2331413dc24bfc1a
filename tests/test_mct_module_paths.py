"""Every MCT module path hwquant serves, with its names: `from hwquant.<path> import <name>` (and, with the
alias on, `from model_compression_toolkit.<path> import <name>`) gives the object defined at its home.

The list was recorded from the modules as they were when each path had a file of its own, before the paths
became entries of one table (hwquant/mct_paths.py); it must keep holding whatever serves them."""
import importlib
import importlib.util
import pickle
import subprocess
import sys
import textwrap

import pytest

# {module: {name: home}}, "hwquant." left out of both: home "module:attr" is that object ("module:" the
# object of the same name), a home without ":" the module itself (a child, or MCT's name for another module)
RECORDED = {
    "core.common": {
        "network_editors": "core.common.network_editors",
    },
    "core.common.network_editors": {
        "ACTIVATION_CONFIG_FIELDS": "core.configuration.network_editor:",
        "BaseAction": "core.configuration.network_editor:",
        "BaseNodeMatcher": "core.configuration.network_editor:",
        "ChangeCandidatesActivationQuantConfigAttr": "core.configuration.network_editor:",
        "ChangeCandidatesActivationQuantizationMethod": "core.configuration.network_editor:",
        "ChangeCandidatesWeightsQuantConfigAttr": "core.configuration.network_editor:",
        "ChangeCandidatesWeightsQuantizationMethod": "core.configuration.network_editor:",
        "ChangeFinalActivationQuantConfigAttr": "core.configuration.network_editor:",
        "ChangeFinalWeightsQuantConfigAttr": "core.configuration.network_editor:",
        "ChangeFinalWeightsQuantizationMethod": "core.configuration.network_editor:",
        "ChangeQuantizationParamFunction": "core.configuration.network_editor:",
        "EditRule": "core.configuration.network_editor:",
        "NodeAndMatcher": "core.configuration.network_editor:",
        "NodeAnyMatcher": "core.configuration.network_editor:",
        "NodeNameFilter": "core.configuration.network_editor:",
        "NodeNameScopeFilter": "core.configuration.network_editor:",
        "NodeNotMatcher": "core.configuration.network_editor:",
        "NodeOrMatcher": "core.configuration.network_editor:",
        "NodeTypeFilter": "core.configuration.network_editor:",
        "WEIGHTS_ATTR_CONFIG_FIELDS": "core.configuration.network_editor:",
        "WEIGHTS_NODE_CONFIG_FIELDS": "core.configuration.network_editor:",
    },
    "core.mixed_precision_quantization_config": {
        "MixedPrecisionQuantizationConfig": "core.configuration.config:",
        "MpDistanceWeighting": "core.configuration.config:",
        "MpMetricNormalization": "core.configuration.config:",
    },
    "exporter.model_wrapper": {
        "get_exportable_keras_model": "keras.mct_paths:",
        "is_keras_layer_exportable": "keras.export:",
        "is_pytorch_layer_exportable": "torch.deployment.export_model:",
        "keras": "exporter.model_wrapper.keras",
    },
    "exporter.model_wrapper.keras": {
        "builder": "exporter.model_wrapper.keras.builder",
        "validate_layer": "exporter.model_wrapper.keras.validate_layer",
    },
    "exporter.model_wrapper.keras.builder": {
        "fully_quantized_model_builder": "exporter.model_wrapper.keras.builder.fully_quantized_model_builder",
    },
    "exporter.model_wrapper.keras.builder.fully_quantized_model_builder": {
        "get_exportable_keras_model": "keras.mct_paths:",
    },
    "exporter.model_wrapper.keras.validate_layer": {
        "is_keras_layer_exportable": "keras.export:",
    },
    "gptq.keras": {
        "quantization_facade": "gptq.keras.quantization_facade",
        "quantizer": "gptq.keras.quantizer",
    },
    "gptq.keras.quantization_facade": {
        "get_keras_gptq_config": "keras.gptq.facade:",
        "keras_gradient_post_training_quantization": "keras.gptq.facade:",
    },
    "gptq.keras.quantizer": {
        "base_keras_gptq_quantizer": "gptq.keras.quantizer.base_keras_gptq_quantizer",
        "soft_rounding": "gptq.keras.quantizer.soft_rounding",
        "ste_rounding": "gptq.keras.quantizer.ste_rounding",
    },
    "gptq.keras.quantizer.base_keras_gptq_quantizer": {
        "BaseKerasGPTQTrainableQuantizer": "keras.gptq.quantizers:",
    },
    "gptq.keras.quantizer.soft_rounding": {
        "symmetric_soft_quantizer": "gptq.keras.quantizer.soft_rounding.symmetric_soft_quantizer",
        "uniform_soft_quantizer": "gptq.keras.quantizer.soft_rounding.uniform_soft_quantizer",
    },
    "gptq.keras.quantizer.soft_rounding.symmetric_soft_quantizer": {
        "SymmetricSoftRoundingGPTQ": "keras.gptq.quantizers:",
    },
    "gptq.keras.quantizer.soft_rounding.uniform_soft_quantizer": {
        "UniformSoftRoundingGPTQ": "keras.gptq.quantizers:",
    },
    "gptq.keras.quantizer.ste_rounding": {
        "symmetric_ste": "gptq.keras.quantizer.ste_rounding.symmetric_ste",
    },
    "gptq.keras.quantizer.ste_rounding.symmetric_ste": {
        "STEWeightGPTQQuantizer": "keras.mct_paths:",
    },
    "ptq": {
        "keras_post_training_quantization": "keras.facade:",
        "pytorch_post_training_quantization": "torch.facade:",
    },
    "qat.keras": {
        "quantization_facade": "qat.keras.quantization_facade",
        "quantizer": "qat.keras.quantizer",
    },
    "qat.keras.quantization_facade": {
        "keras_quantization_aware_training_finalize_experimental": "keras.qat:",
        "keras_quantization_aware_training_init_experimental": "keras.qat:",
    },
    "qat.keras.quantizer": {
        "base_keras_qat_weight_quantizer": "qat.keras.quantizer.base_keras_qat_weight_quantizer",
        "lsq": "qat.keras.quantizer.lsq",
        "ste_rounding": "qat.keras.quantizer.ste_rounding",
    },
    "qat.keras.quantizer.base_keras_qat_weight_quantizer": {
        "BaseKerasQATWeightTrainableQuantizer": "keras.mct_paths:",
    },
    "qat.keras.quantizer.lsq": {
        "symmetric_lsq": "qat.keras.quantizer.lsq.symmetric_lsq",
        "uniform_lsq": "qat.keras.quantizer.lsq.uniform_lsq",
    },
    "qat.keras.quantizer.lsq.symmetric_lsq": {
        "LSQWeightQATQuantizer": "keras.mct_paths:",
    },
    "qat.keras.quantizer.lsq.uniform_lsq": {
        "LSQUniformWeightQATQuantizer": "keras.mct_paths:",
    },
    "qat.keras.quantizer.ste_rounding": {
        "symmetric_ste": "qat.keras.quantizer.ste_rounding.symmetric_ste",
        "uniform_ste": "qat.keras.quantizer.ste_rounding.uniform_ste",
    },
    "qat.keras.quantizer.ste_rounding.symmetric_ste": {
        "STEWeightQATQuantizer": "keras.mct_paths:",
    },
    "qat.keras.quantizer.ste_rounding.uniform_ste": {
        "STEUniformWeightQATQuantizer": "keras.mct_paths:",
    },
    "target_platform": {
        "AttributeFilter": "tpc.layer_filters:",
        "AttributeQuantizationConfig": "tpc.schema:",
        "Contains": "tpc.layer_filters:",
        "Eq": "tpc.layer_filters:",
        "Fusing": "tpc.legacy:",
        "Greater": "tpc.layer_filters:",
        "GreaterEq": "tpc.layer_filters:",
        "LayerFilterParams": "tpc.layer_filters:",
        "NotEq": "tpc.layer_filters:",
        "OpQuantizationConfig": "tpc.schema:",
        "OperationsSetToLayers": "tpc.attachment:",
        "OperationsToLayers": "tpc.attachment:",
        "OperatorSetConcat": "tpc.legacy:",
        "OperatorSetGroup": "tpc.schema:",
        "OperatorSetNames": "tpc.enums:",
        "OperatorsSet": "tpc.legacy:",
        "QuantizationConfigOptions": "tpc.schema:",
        "QuantizationMethod": "tpc.enums:",
        "Signedness": "tpc.enums:",
        "Smaller": "tpc.layer_filters:",
        "SmallerEq": "tpc.layer_filters:",
        "TargetPlatformCapabilities": "tpc.attachment:FrameworkQuantizationCapabilities",
        "TargetPlatformModel": "tpc.legacy:",
        "get_default_quantization_config_options": "tpc.legacy:",
    },
    "target_platform_capabilities": {
        "AttributeFilter": "tpc:",
        "AttributeQuantizationConfig": "tpc:",
        "Contains": "tpc:",
        "Eq": "tpc:",
        "FrameworkQuantizationCapabilities": "tpc:",
        "Fusing": "tpc:",
        "Greater": "tpc:",
        "GreaterEq": "tpc:",
        "LayerFilterParams": "tpc:",
        "NotEq": "tpc:",
        "OpQuantizationConfig": "tpc:",
        "OperationsSetToLayers": "tpc:",
        "OperationsToLayers": "tpc:",
        "OperatorSetConcat": "tpc:",
        "OperatorSetGroup": "tpc:",
        "OperatorSetNames": "tpc:",
        "OperatorsSet": "tpc:",
        "QuantizationConfigOptions": "tpc:",
        "QuantizationMethod": "tpc:",
        "SCHEMA_VERSION": "tpc:",
        "Signedness": "tpc:",
        "Smaller": "tpc:",
        "SmallerEq": "tpc:",
        "TargetPlatformCapabilities": "tpc:",
        "TargetPlatformModel": "tpc:",
        "constants": "target_platform_capabilities.constants",
        "export_target_platform_capabilities": "tpc:",
        "get_current_tpc": "tpc:",
        "get_target_platform_capabilities": "tpc:",
        "get_target_platform_capabilities_sdsp": "tpc:",
        "load_target_platform_capabilities": "tpc:",
        "schema": "target_platform_capabilities.schema",
        "target_platform": "target_platform_capabilities.target_platform",
        "tpc_io_handler": "target_platform_capabilities.tpc_io_handler",
    },
    "target_platform_capabilities.schema": {
        "mct_current_schema": "target_platform_capabilities.schema.mct_current_schema",
        "v1": "target_platform_capabilities.schema.v1",
        "v2": "target_platform_capabilities.schema.v2",
    },
    "target_platform_capabilities.schema.mct_current_schema": {
        "AttributeQuantizationConfig": "tpc.schema:",
        "Fusing": "tpc.schema:",
        "OpQuantizationConfig": "tpc.schema:",
        "OperatorSetGroup": "tpc.schema:",
        "OperatorSetNames": "tpc.enums:",
        "OperatorsSet": "tpc.schema:",
        "QuantizationConfigOptions": "tpc.schema:",
        "QuantizationMethod": "tpc.enums:",
        "SCHEMA_VERSION": "tpc.schema:",
        "Signedness": "tpc.enums:",
        "TargetPlatformCapabilities": "tpc.schema:",
        "schema": "target_platform_capabilities.schema.v2",
    },
    "target_platform_capabilities.schema.v2": {
        "AttributeQuantizationConfig": "tpc.schema:",
        "Fusing": "tpc.schema:",
        "OpQuantizationConfig": "tpc.schema:",
        "OperatorSetGroup": "tpc.schema:",
        "OperatorSetNames": "tpc.enums:",
        "OperatorsSet": "tpc.schema:",
        "QuantizationConfigOptions": "tpc.schema:",
        "QuantizationMethod": "tpc.enums:",
        "SCHEMA_VERSION": "tpc.schema:",
        "Signedness": "tpc.enums:",
        "TargetPlatformCapabilities": "tpc.schema:",
    },
    "target_platform_capabilities.target_platform": {
        "AttributeFilter": "tpc.layer_filters:",
        "AttributeQuantizationConfig": "tpc.schema:",
        "Contains": "tpc.layer_filters:",
        "Eq": "tpc.layer_filters:",
        "Fusing": "tpc.legacy:",
        "Greater": "tpc.layer_filters:",
        "GreaterEq": "tpc.layer_filters:",
        "LayerFilterParams": "tpc.layer_filters:",
        "NotEq": "tpc.layer_filters:",
        "OpQuantizationConfig": "tpc.schema:",
        "OperationsSetToLayers": "tpc.attachment:",
        "OperationsToLayers": "tpc.attachment:",
        "OperatorSetConcat": "tpc.legacy:",
        "OperatorSetGroup": "tpc.schema:",
        "OperatorSetNames": "tpc.enums:",
        "OperatorsSet": "tpc.legacy:",
        "QuantizationConfigOptions": "tpc.schema:",
        "QuantizationMethod": "tpc.enums:",
        "Signedness": "tpc.enums:",
        "Smaller": "tpc.layer_filters:",
        "SmallerEq": "tpc.layer_filters:",
        "TargetPlatformCapabilities": "tpc.attachment:FrameworkQuantizationCapabilities",
        "TargetPlatformModel": "tpc.legacy:",
        "get_default_quantization_config_options": "tpc.legacy:",
    },
    "target_platform_capabilities.tpc_io_handler": {
        "export_target_platform_capabilities": "tpc.serialization:",
        "load_target_platform_capabilities": "tpc.serialization:",
    },
    "trainable_infrastructure.keras": {
        "activation_quantizers": "trainable_infrastructure.keras.activation_quantizers",
        "base_keras_quantizer": "trainable_infrastructure.keras.base_keras_quantizer",
        "load_model": "trainable_infrastructure.keras.load_model",
        "quantize_wrapper": "trainable_infrastructure.keras.quantize_wrapper",
    },
    "trainable_infrastructure.keras.activation_quantizers": {
        "BaseKerasActivationTrainableQuantizer": "keras.trainable:",
        "LSQSymmetricActivationTrainableQuantizer": "keras.trainable:",
        "LSQUniformActivationTrainableQuantizer": "keras.trainable:",
        "STESymmetricActivationTrainableQuantizer": "keras.trainable:",
        "STEUniformActivationTrainableQuantizer": "keras.trainable:",
        "base_activation_quantizer": "trainable_infrastructure.keras.activation_quantizers.base_activation_quantizer",
        "lsq": "trainable_infrastructure.keras.activation_quantizers.lsq",
        "ste": "trainable_infrastructure.keras.activation_quantizers.ste",
    },
    "trainable_infrastructure.keras.activation_quantizers.base_activation_quantizer": {
        "BaseKerasActivationTrainableQuantizer": "keras.trainable:",
    },
    "trainable_infrastructure.keras.activation_quantizers.lsq": {
        "symmetric_lsq": "trainable_infrastructure.keras.activation_quantizers.lsq.symmetric_lsq",
        "uniform_lsq": "trainable_infrastructure.keras.activation_quantizers.lsq.uniform_lsq",
    },
    "trainable_infrastructure.keras.activation_quantizers.lsq.symmetric_lsq": {
        "LSQSymmetricActivationTrainableQuantizer": "keras.trainable:",
    },
    "trainable_infrastructure.keras.activation_quantizers.lsq.uniform_lsq": {
        "LSQUniformActivationTrainableQuantizer": "keras.trainable:",
    },
    "trainable_infrastructure.keras.activation_quantizers.ste": {
        "symmetric_ste": "trainable_infrastructure.keras.activation_quantizers.ste.symmetric_ste",
        "uniform_ste": "trainable_infrastructure.keras.activation_quantizers.ste.uniform_ste",
    },
    "trainable_infrastructure.keras.activation_quantizers.ste.symmetric_ste": {
        "STESymmetricActivationTrainableQuantizer": "keras.trainable:",
    },
    "trainable_infrastructure.keras.activation_quantizers.ste.uniform_ste": {
        "STEUniformActivationTrainableQuantizer": "keras.trainable:",
    },
    "trainable_infrastructure.keras.base_keras_quantizer": {
        "BaseKerasTrainableQuantizer": "keras.trainable:",
    },
    "trainable_infrastructure.keras.load_model": {
        "keras_load_quantized_model": "keras.facade:",
    },
    "trainable_infrastructure.keras.quantize_wrapper": {
        "KerasTrainableQuantizationWrapper": "keras.mct_paths:",
    },
    "xquant.common": {
        "xquant_config": "xquant.common.xquant_config",
    },
    "xquant.common.xquant_config": {
        "XQuantConfig": "xquant.config:",
    },
    "xquant.keras": {
        "facade_xquant_report": "xquant.keras.facade_xquant_report",
    },
    "xquant.keras.facade_xquant_report": {
        "xquant_report_keras_experimental": "keras.xquant:",
        "xquant_report_troubleshoot_keras_experimental": "keras.xquant:",
    },
    "xquant.pytorch": {
        "facade_xquant_report": "xquant.pytorch.facade_xquant_report",
    },
    "xquant.pytorch.facade_xquant_report": {
        "xquant_report_pytorch_experimental": "torch.xquant:",
        "xquant_report_troubleshoot_pytorch_experimental": "torch.xquant:",
    },
    "core": {
        "common": "core.common",
        "mixed_precision_quantization_config": "core.mixed_precision_quantization_config",
    },
    "exporter": {
        "model_wrapper": "exporter.model_wrapper",
    },
    "gptq": {
        "keras": "gptq.keras",
    },
    "": {
        "ptq": "ptq",
        "target_platform": "target_platform",
        "target_platform_capabilities": "target_platform_capabilities",
    },
    "qat": {
        "keras": "qat.keras",
    },
    "trainable_infrastructure": {
        "keras": "trainable_infrastructure.keras",
    },
    "xquant": {
        "common": "xquant.common",
        "keras": "xquant.keras",
        "pytorch": "xquant.pytorch",
    },
}


def _full(module):
    return "hwquant" + ("." + module if module else "")


PATHS = [(_full(module), name, _full(home.partition(":")[0]) + (":" + (home.partition(":")[2] or name) if ":" in home else ""))
         for module, names in RECORDED.items() for name, home in names.items()]


def _home(home):
    """The object at ``home``, importing its framework (skipped where that framework is not installed)."""
    module, _, attr = home.partition(":")
    if module.startswith("hwquant.keras."):
        pytest.importorskip("keras")
    if module.startswith("hwquant.torch."):
        pytest.importorskip("torch")
    loaded = importlib.import_module(module)
    return getattr(loaded, attr) if attr else loaded


def _from_import(module, name):
    scope = {}
    exec(f"from {module} import {name} as obj", scope)  # the statement user code writes
    return scope["obj"]


@pytest.mark.parametrize("module, name, home", PATHS, ids=[f"{m}.{n}" for m, n, _ in PATHS])
def test_hwquant_path_gives_the_object_at_home(module, name, home):
    expected = _home(home)
    assert _from_import(module, name) is expected
    loaded = importlib.import_module(module)
    assert getattr(loaded, name) is expected
    if ":" in home:  # (a module's dir() lists its names; its child modules, maybe not)
        assert name in dir(loaded)


@pytest.fixture
def mct_alias():
    from hwquant import mct_alias
    mct_alias.enable()
    yield
    mct_alias.disable()


@pytest.mark.parametrize("module, name, home", PATHS, ids=[f"{m}.{n}" for m, n, _ in PATHS])
def test_mct_path_gives_the_same_object(mct_alias, module, name, home):
    expected = _home(home)
    alias = "model_compression_toolkit" + module[len("hwquant"):]
    assert _from_import(alias, name) is expected
    assert importlib.import_module(alias) is importlib.import_module(module)


def test_every_path_is_a_module_with_a_spec():
    for module in sorted({m for m, _, _ in PATHS} | {h for _, _, h in PATHS if ":" not in h}):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.name == module, module
        assert importlib.import_module(module).__spec__.name == module
        assert sys.modules[module].__name__ == module


def test_objects_pickle_by_reference():
    # pickled by reference, an object names its home module, which stays importable
    for module, name, home in PATHS:
        if ":" in home and not home.startswith(("hwquant.keras.", "hwquant.torch.")):
            obj = _home(home)
            if isinstance(obj, type) or callable(obj):
                assert pickle.loads(pickle.dumps(obj)) is obj, (module, name)


# ------------------------------------------------------------------ how the table's modules are made
def test_the_table_modules_are_listed_and_resolved_as_modules():
    import pkgutil

    import hwquant
    from hwquant.mct_paths import MODULES
    listed = {m.name: m.ispkg for m in pkgutil.iter_modules(hwquant.qat.__path__)}
    assert listed["keras"] and not listed["config"]
    quantizer = importlib.import_module("hwquant.qat.keras.quantizer")
    assert {(m.name, m.ispkg) for m in pkgutil.iter_modules(quantizer.__path__)} == {
        ("base_keras_qat_weight_quantizer", False), ("lsq", True), ("ste_rounding", True)}
    walked = {m.name for m in pkgutil.walk_packages(hwquant.trainable_infrastructure.__path__,
                                                    "hwquant.trainable_infrastructure.")}
    assert {m for m in MODULES if m.startswith("hwquant.trainable_infrastructure.")} <= walked
    assert {"target_platform", "target_platform_capabilities"} <= {m.name for m in pkgutil.iter_modules(hwquant.__path__)}
    assert pkgutil.resolve_name("hwquant.target_platform:TargetPlatformModel") is hwquant.tpc.legacy.TargetPlatformModel
    made = importlib.import_module("hwquant.core.common.network_editors")
    assert not hasattr(made, "__file__") and made.__spec__.origin.endswith("mct_paths.py") and made.__doc__
    from hwquant.core.configuration import network_editor
    assert made.__all__ == network_editor.__all__ and set(network_editor.__all__) <= set(dir(made))
    scope: dict = {}
    exec("from hwquant.core.common.network_editors import *", scope)
    assert scope["NodeNameFilter"] is network_editor.NodeNameFilter
    v2 = importlib.import_module("hwquant.target_platform_capabilities.schema.v2")
    assert "SCHEMA_VERSION" in v2.__all__ and "schema" not in importlib.import_module(
        "hwquant.target_platform_capabilities.schema.mct_current_schema").__all__
    with pytest.raises(AttributeError, match="NodeNameFiltr"):
        made.NodeNameFiltr  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hwquant.qat.keras.quantizer.nope")
    assert importlib.reload(made) is made and made.NodeNameFilter is network_editor.NodeNameFilter


def test_a_table_served_from_elsewhere(tmp_path, monkeypatch):
    """The finder on a package of its own: a folder left behind (no files) does not shadow a table module;
    a table module with a file takes its names from the table; the table's modules are listed."""
    import pkgutil

    from hwquant import lazy
    pkg = tmp_path / "tablepkg"
    (pkg / "gone" / "__pycache__").mkdir(parents=True)
    (pkg / "withfile").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "real.py").write_text("X = 1\n__all__ = ['X']\n\n\ndef f():\n    return 2\n")
    (pkg / "withfile" / "__init__.py").write_text("from hwquant.lazy import served as _s\n\n"
                                                  "__getattr__, __dir__ = _s(__name__, globals())\n")
    (pkg / "withfile" / "code.py").write_text("Y = 3\n")
    table = {"tablepkg.gone": {"X": "tablepkg.real", "g": "tablepkg.real:f", "real": "tablepkg.real:"},
             "tablepkg.gone.leaf": {"*": "tablepkg.real"},
             "tablepkg.withfile": {"code": "tablepkg.withfile.code:", "X": "tablepkg.real"},
             "tablepkg.withfile.made": {}}
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    lazy.serve_modules(table, str(tmp_path / "table.py"))
    try:
        import tablepkg.gone as gone
        real = importlib.import_module("tablepkg.real")
        assert gone.__spec__.origin == str(tmp_path / "table.py") and gone.__path__ == [lazy.TABLE_ENTRY + "tablepkg.gone"]
        assert gone.X == 1 and gone.g is real.f and gone.real is real and gone.leaf.X == 1 and gone.leaf.__all__ == ["X"]
        assert sorted(dir(gone)) == ["X", "g", "leaf", "real"]
        import tablepkg.withfile as withfile
        assert withfile.__file__ == str(pkg / "withfile" / "__init__.py")
        assert withfile.X == 1 and withfile.code.Y == 3 and withfile.made is sys.modules["tablepkg.withfile.made"]
        import tablepkg
        assert {m.name for m in pkgutil.iter_modules(tablepkg.__path__)} == {"gone", "real", "withfile"}
        assert {m.name for m in pkgutil.iter_modules(withfile.__path__)} == {"code", "made"}
        assert importlib.util.find_spec("tablepkg.gone.leaf").loader is importlib.util.find_spec("tablepkg.gone").loader
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "tablepkg"]:
            del sys.modules[name]


def test_a_stand_in_pickles_by_its_path():
    # without its framework, a table module's name is a stand-in; pickled by reference, it comes back
    code = textwrap.dedent("""
        import pickle, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("keras", "tensorflow"):
                    raise ModuleNotFoundError(name, name=name)
        sys.meta_path.insert(0, Block())
        from hwquant.qat.keras.quantizer.lsq.symmetric_lsq import LSQWeightQATQuantizer as Q
        from hwquant import lazy
        assert lazy.is_stand_in(Q) and Q.__module__ == "hwquant.qat.keras.quantizer.lsq.symmetric_lsq"
        assert pickle.loads(pickle.dumps(Q)) is Q
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_alias_keeps_the_specs(mct_alias):
    made = importlib.import_module("model_compression_toolkit.qat.keras.quantizer.lsq")
    assert made is importlib.import_module("hwquant.qat.keras.quantizer.lsq")
    assert made.__spec__.name == "hwquant.qat.keras.quantizer.lsq" and made.__name__ == "hwquant.qat.keras.quantizer.lsq"
