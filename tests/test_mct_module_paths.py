"""Every MCT module path hwquant serves, with its names: `from hwquant.<path> import <name>` (and, with the
alias on, `from model_compression_toolkit.<path> import <name>`) gives the object defined at its home.

The list was recorded from the modules as they were when each path had a file of its own, before the paths
became entries of one table (hwquant/mct_paths.py); it must keep holding whatever serves them."""
import importlib
import importlib.util
import pickle
import sys

import pytest

# {module: {name: home}}, "hwquant." left out of both: home "module:attr" is that object ("module:" the
# object of the same name), a home without ":" the module itself (a child, or MCT's name for another module)
RECORDED = {
    "core.common": {
        "network_editors": "core.common.network_editors",
    },
    "core.common.network_editors": {
        "ACTIVATION_CONFIG_FIELDS": "core.network_editor:",
        "BaseAction": "core.network_editor:",
        "BaseNodeMatcher": "core.network_editor:",
        "ChangeCandidatesActivationQuantConfigAttr": "core.network_editor:",
        "ChangeCandidatesActivationQuantizationMethod": "core.network_editor:",
        "ChangeCandidatesWeightsQuantConfigAttr": "core.network_editor:",
        "ChangeCandidatesWeightsQuantizationMethod": "core.network_editor:",
        "ChangeFinalActivationQuantConfigAttr": "core.network_editor:",
        "ChangeFinalWeightsQuantConfigAttr": "core.network_editor:",
        "ChangeFinalWeightsQuantizationMethod": "core.network_editor:",
        "ChangeQuantizationParamFunction": "core.network_editor:",
        "EditRule": "core.network_editor:",
        "NodeAndMatcher": "core.network_editor:",
        "NodeAnyMatcher": "core.network_editor:",
        "NodeNameFilter": "core.network_editor:",
        "NodeNameScopeFilter": "core.network_editor:",
        "NodeNotMatcher": "core.network_editor:",
        "NodeOrMatcher": "core.network_editor:",
        "NodeTypeFilter": "core.network_editor:",
        "WEIGHTS_ATTR_CONFIG_FIELDS": "core.network_editor:",
        "WEIGHTS_NODE_CONFIG_FIELDS": "core.network_editor:",
    },
    "core.mixed_precision_quantization_config": {
        "MixedPrecisionQuantizationConfig": "core.config:",
        "MpDistanceWeighting": "core.config:",
        "MpMetricNormalization": "core.config:",
    },
    "exporter.model_wrapper": {
        "get_exportable_keras_model": "keras.mct_paths:",
        "is_keras_layer_exportable": "keras.export:",
        "is_pytorch_layer_exportable": "torch.export_model:",
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
        "get_keras_gptq_config": "keras.gptq.config:",
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
