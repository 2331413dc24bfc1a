"""Target platform capabilities: the schema, JSON I/O, layer attachment and the shipped platforms.

Framework-free: nothing here imports torch, tensorflow or keras.
"""
from hwquant.tpc.attachment import FrameworkQuantizationCapabilities, OperationsSetToLayers, OperationsToLayers, get_current_tpc
from hwquant.tpc.enums import OperatorSetNames, QuantizationMethod, Signedness
from hwquant.tpc.layer_filters import (AttributeFilter, Contains, Eq, Greater, GreaterEq, LayerFilterParams, NotEq,
                                       Smaller, SmallerEq)
from hwquant.tpc.platforms import get_target_platform_capabilities, get_target_platform_capabilities_sdsp
from hwquant.tpc.schema import (SCHEMA_VERSION, AttributeQuantizationConfig, Fusing, OperatorSetGroup, OperatorsSet,
                                OpQuantizationConfig, QuantizationConfigOptions, TargetPlatformCapabilities)
from hwquant.tpc.serialization import (export_target_platform_capabilities, load_target_platform_capabilities,
                                       tpc_from_dict, tpc_from_json, tpc_to_dict)

# Older names (seed API): a concatenation of sets is a group; the TPC itself was a "target platform model".
OperatorSetConcat = OperatorSetGroup
TargetPlatformModel = TargetPlatformCapabilities
