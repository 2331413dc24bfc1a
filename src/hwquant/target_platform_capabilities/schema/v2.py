"""Schema version 2, MCT's `schema.v2`: the current schema. `mct_current_schema` re-exports its classes and
names this module `mct_current_schema.schema`, as MCT does."""
from hwquant.tpc.enums import OperatorSetNames, QuantizationMethod, Signedness
from hwquant.tpc.schema import (SCHEMA_VERSION, AttributeQuantizationConfig, Fusing, OperatorSetGroup, OperatorsSet,
                                OpQuantizationConfig, QuantizationConfigOptions, TargetPlatformCapabilities)

__all__ = ["SCHEMA_VERSION", "AttributeQuantizationConfig", "Fusing", "OperatorSetGroup", "OperatorSetNames",
           "OperatorsSet", "OpQuantizationConfig", "QuantizationConfigOptions", "QuantizationMethod", "Signedness",
           "TargetPlatformCapabilities"]
