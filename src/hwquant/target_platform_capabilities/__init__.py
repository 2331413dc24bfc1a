"""Public namespace `mct.target_platform_capabilities` (mirrors the documented API)."""
from hwquant.target_platform_capabilities import constants, schema, target_platform, tpc_io_handler  # noqa: E402
from hwquant.tpc import (SCHEMA_VERSION, AttributeFilter, AttributeQuantizationConfig, Contains, Eq,
                         FrameworkQuantizationCapabilities, Fusing, Greater, GreaterEq, LayerFilterParams, NotEq,
                         OperationsSetToLayers, OperationsToLayers, OperatorSetConcat, OperatorSetGroup,
                         OperatorSetNames, OperatorsSet, OpQuantizationConfig, QuantizationConfigOptions,
                         QuantizationMethod, Signedness, Smaller, SmallerEq, TargetPlatformCapabilities,
                         TargetPlatformModel, export_target_platform_capabilities, get_current_tpc,
                         get_target_platform_capabilities, get_target_platform_capabilities_sdsp,
                         load_target_platform_capabilities)
