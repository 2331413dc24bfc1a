"""The current TPC schema under the documented module path."""
from hwquant.tpc.enums import OperatorSetNames, QuantizationMethod, Signedness
from hwquant.tpc.schema import (SCHEMA_VERSION, AttributeQuantizationConfig, Fusing, OperatorSetGroup, OperatorsSet,
                                OpQuantizationConfig, QuantizationConfigOptions, TargetPlatformCapabilities)

__all__ = ["SCHEMA_VERSION", "AttributeQuantizationConfig", "Fusing", "OperatorSetGroup", "OperatorSetNames",
           "OperatorsSet", "OpQuantizationConfig", "QuantizationConfigOptions", "QuantizationMethod", "Signedness",
           "TargetPlatformCapabilities"]
