"""MCT's module paths that hwquant serves, and the names each gives: the one place that says which of
Model Compression Toolkit's modules exist in hwquant (`import hwquant as mct`, and
`model_compression_toolkit.<path>` through hwquant.mct_alias) beyond hwquant's own packages.

A module listed here has no file: hwquant.lazy's finder makes it when it is imported, and each of its names
resolves on first use to the object at its home (`hwquant.lazy.serve_modules`, which hwquant/__init__.py
installs). Making one imports nothing; a name whose home is in a framework package (hwquant.torch,
hwquant.keras) imports its framework when it is read, and where that framework is not installed it is a
stand-in whose call names the extra to install (hwquant.lazy.stand_in). The two TPC packages below have
files of their own (constants.py and schema/v1.py hold code): their __init__.py takes its names from here.

    {module: {name: home}}
    home "pkg.mod"        the object of the same name in pkg.mod (as hwquant.lazy.lazy_table's tables)
    home "pkg.mod:attr"   the object attr of pkg.mod (MCT's name for it differs)
    home "pkg.mod:"       the module pkg.mod itself
    name "*"              every name in the home module's __all__
A module's child modules listed here are its attributes too (`mct.qat.keras.quantizer.lsq`). This file
imports nothing: tests/test_import_isolation.py reads it to check the homes (no framework module, no cycle).
"""
from typing import Dict


def _each(home: str, names: str) -> Dict[str, str]:
    """{name: home} for each of the space-separated names."""
    return dict.fromkeys(names.split(), home)


_TPC = "hwquant.tpc"
_KERAS_TRAINABLE = "hwquant.keras.trainable"
_KERAS_MCT_NAMES = "hwquant.keras.mct_paths"  # MCT's other names for hwquant's Keras classes

# the seed's namespace: TargetPlatformModel builds the hardware description; TargetPlatformCapabilities is
# that description attached to a framework's layers (today's FrameworkQuantizationCapabilities)
_TARGET_PLATFORM = {
    "TargetPlatformCapabilities": "hwquant.tpc.attachment:FrameworkQuantizationCapabilities",
    **_each("hwquant.tpc.attachment", "OperationsSetToLayers OperationsToLayers"),
    **_each("hwquant.tpc.enums", "OperatorSetNames QuantizationMethod Signedness"),
    **_each("hwquant.tpc.layer_filters", "AttributeFilter Contains Eq Greater GreaterEq LayerFilterParams NotEq "
                                         "Smaller SmallerEq"),
    **_each("hwquant.tpc.legacy", "Fusing OperatorSetConcat OperatorsSet TargetPlatformModel "
                                  "get_default_quantization_config_options"),
    **_each("hwquant.tpc.schema", "AttributeQuantizationConfig OperatorSetGroup OpQuantizationConfig QuantizationConfigOptions"),
}
# the schema's components, MCT's schema.v2 (the current version)
_SCHEMA_V2 = {
    **_each("hwquant.tpc.schema", "SCHEMA_VERSION AttributeQuantizationConfig Fusing OperatorSetGroup OperatorsSet "
                                  "OpQuantizationConfig QuantizationConfigOptions TargetPlatformCapabilities"),
    **_each("hwquant.tpc.enums", "OperatorSetNames QuantizationMethod Signedness"),
}

MODULES: Dict[str, Dict[str, str]] = {
    # ------------------------------------------------------------------ target platform: three ways in
    "hwquant.target_platform": _TARGET_PLATFORM,
    # a package with files of its own (constants.py, schema/v1.py): its __init__.py serves these names
    "hwquant.target_platform_capabilities": {
        **_each(_TPC, "SCHEMA_VERSION AttributeFilter AttributeQuantizationConfig Contains Eq "
                      "FrameworkQuantizationCapabilities Fusing Greater GreaterEq LayerFilterParams NotEq "
                      "OperationsSetToLayers OperationsToLayers OperatorSetConcat OperatorSetGroup OperatorSetNames "
                      "OperatorsSet OpQuantizationConfig QuantizationConfigOptions QuantizationMethod Signedness "
                      "Smaller SmallerEq TargetPlatformCapabilities TargetPlatformModel "
                      "export_target_platform_capabilities get_current_tpc get_target_platform_capabilities "
                      "get_target_platform_capabilities_sdsp load_target_platform_capabilities"),
        "constants": "hwquant.target_platform_capabilities.constants:",
        "schema": "hwquant.target_platform_capabilities.schema:",
    },
    "hwquant.target_platform_capabilities.target_platform": _TARGET_PLATFORM,  # the older module path
    "hwquant.target_platform_capabilities.tpc_io_handler": _each(
        "hwquant.tpc.serialization", "export_target_platform_capabilities load_target_platform_capabilities"),
    # a package with a file of its own (v1.py: the schema at version 1, which edge-mdt-tpc's TPCs import)
    "hwquant.target_platform_capabilities.schema": {"v1": "hwquant.target_platform_capabilities.schema.v1:"},
    "hwquant.target_platform_capabilities.schema.v2": _SCHEMA_V2,
    "hwquant.target_platform_capabilities.schema.mct_current_schema": {
        **_SCHEMA_V2, "schema": "hwquant.target_platform_capabilities.schema.v2:"},  # (as MCT: the current version)
    # ------------------------------------------------------------------ core
    "hwquant.core.mixed_precision_quantization_config": _each(
        "hwquant.core.configuration.config", "MixedPrecisionQuantizationConfig MpDistanceWeighting MpMetricNormalization"),
    # MCT's internal paths that downstream code reaches (Ultralytics' IMX500 export calls
    # mct.core.common.network_editors.NodeNameFilter)
    "hwquant.core.common": {},
    "hwquant.core.common.network_editors": {"*": "hwquant.core.configuration.network_editor"},
    # ------------------------------------------------------------------ exporter
    "hwquant.exporter.model_wrapper": {
        "is_keras_layer_exportable": "hwquant.keras.export",
        "get_exportable_keras_model": _KERAS_MCT_NAMES,
        "is_pytorch_layer_exportable": "hwquant.torch.deployment.export_model",
    },
    "hwquant.exporter.model_wrapper.keras": {},
    "hwquant.exporter.model_wrapper.keras.builder": {},
    "hwquant.exporter.model_wrapper.keras.builder.fully_quantized_model_builder": {
        "get_exportable_keras_model": _KERAS_MCT_NAMES},
    "hwquant.exporter.model_wrapper.keras.validate_layer": {"is_keras_layer_exportable": "hwquant.keras.export"},
    # ------------------------------------------------------------------ Keras GPTQ
    "hwquant.gptq.keras": {},
    "hwquant.gptq.keras.quantization_facade": {
        "keras_gradient_post_training_quantization": "hwquant.keras.gptq.facade",
        "get_keras_gptq_config": "hwquant.keras.gptq.facade",
    },
    "hwquant.gptq.keras.quantizer": {},
    "hwquant.gptq.keras.quantizer.base_keras_gptq_quantizer": {
        "BaseKerasGPTQTrainableQuantizer": "hwquant.keras.gptq.quantizers"},
    "hwquant.gptq.keras.quantizer.soft_rounding": {},
    "hwquant.gptq.keras.quantizer.soft_rounding.symmetric_soft_quantizer": {
        "SymmetricSoftRoundingGPTQ": "hwquant.keras.gptq.quantizers"},  # power-of-two / symmetric
    "hwquant.gptq.keras.quantizer.soft_rounding.uniform_soft_quantizer": {
        "UniformSoftRoundingGPTQ": "hwquant.keras.gptq.quantizers"},
    "hwquant.gptq.keras.quantizer.ste_rounding": {},
    "hwquant.gptq.keras.quantizer.ste_rounding.symmetric_ste": {"STEWeightGPTQQuantizer": _KERAS_MCT_NAMES},
    # ------------------------------------------------------------------ Keras QAT: the weight quantizers
    "hwquant.qat.keras": {},
    "hwquant.qat.keras.quantization_facade": _each(
        "hwquant.keras.qat", "keras_quantization_aware_training_init_experimental "
                             "keras_quantization_aware_training_finalize_experimental"),
    "hwquant.qat.keras.quantizer": {},
    "hwquant.qat.keras.quantizer.base_keras_qat_weight_quantizer": {
        "BaseKerasQATWeightTrainableQuantizer": _KERAS_MCT_NAMES},
    "hwquant.qat.keras.quantizer.lsq": {},
    "hwquant.qat.keras.quantizer.lsq.symmetric_lsq": {"LSQWeightQATQuantizer": _KERAS_MCT_NAMES},  # power-of-two / symmetric
    "hwquant.qat.keras.quantizer.lsq.uniform_lsq": {"LSQUniformWeightQATQuantizer": _KERAS_MCT_NAMES},
    "hwquant.qat.keras.quantizer.ste_rounding": {},
    "hwquant.qat.keras.quantizer.ste_rounding.symmetric_ste": {"STEWeightQATQuantizer": _KERAS_MCT_NAMES},
    "hwquant.qat.keras.quantizer.ste_rounding.uniform_ste": {"STEUniformWeightQATQuantizer": _KERAS_MCT_NAMES},
    # ------------------------------------------------------------------ Keras trainable infrastructure
    "hwquant.trainable_infrastructure.keras": {},
    "hwquant.trainable_infrastructure.keras.base_keras_quantizer": {"BaseKerasTrainableQuantizer": _KERAS_TRAINABLE},
    "hwquant.trainable_infrastructure.keras.load_model": {"keras_load_quantized_model": "hwquant.keras.facade"},
    "hwquant.trainable_infrastructure.keras.quantize_wrapper": {"KerasTrainableQuantizationWrapper": _KERAS_MCT_NAMES},
    "hwquant.trainable_infrastructure.keras.activation_quantizers": _each(
        _KERAS_TRAINABLE, "BaseKerasActivationTrainableQuantizer STESymmetricActivationTrainableQuantizer "
                          "STEUniformActivationTrainableQuantizer LSQSymmetricActivationTrainableQuantizer "
                          "LSQUniformActivationTrainableQuantizer"),
    "hwquant.trainable_infrastructure.keras.activation_quantizers.base_activation_quantizer": {
        "BaseKerasActivationTrainableQuantizer": _KERAS_TRAINABLE},
    "hwquant.trainable_infrastructure.keras.activation_quantizers.lsq": {},
    "hwquant.trainable_infrastructure.keras.activation_quantizers.lsq.symmetric_lsq": {
        "LSQSymmetricActivationTrainableQuantizer": _KERAS_TRAINABLE},
    "hwquant.trainable_infrastructure.keras.activation_quantizers.lsq.uniform_lsq": {
        "LSQUniformActivationTrainableQuantizer": _KERAS_TRAINABLE},
    "hwquant.trainable_infrastructure.keras.activation_quantizers.ste": {},
    "hwquant.trainable_infrastructure.keras.activation_quantizers.ste.symmetric_ste": {
        "STESymmetricActivationTrainableQuantizer": _KERAS_TRAINABLE},
    "hwquant.trainable_infrastructure.keras.activation_quantizers.ste.uniform_ste": {
        "STEUniformActivationTrainableQuantizer": _KERAS_TRAINABLE},
    # ------------------------------------------------------------------ xquant
    "hwquant.xquant.common": {},
    "hwquant.xquant.common.xquant_config": {"XQuantConfig": "hwquant.xquant.config"},  # its documented path
    "hwquant.xquant.keras": {},
    "hwquant.xquant.keras.facade_xquant_report": _each(
        "hwquant.keras.xquant", "xquant_report_keras_experimental xquant_report_troubleshoot_keras_experimental"),
    "hwquant.xquant.pytorch": {},
    "hwquant.xquant.pytorch.facade_xquant_report": _each(
        "hwquant.torch.xquant", "xquant_report_pytorch_experimental xquant_report_troubleshoot_pytorch_experimental"),
}
