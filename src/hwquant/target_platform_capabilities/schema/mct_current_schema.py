"""The current TPC schema under the documented module path."""
from hwquant.tpc.enums import OperatorSetNames, QuantizationMethod, Signedness  # noqa: F401
from hwquant.tpc.schema import (SCHEMA_VERSION, AttributeQuantizationConfig, Fusing, OperatorSetGroup,  # noqa: F401
                                OperatorsSet, OpQuantizationConfig, QuantizationConfigOptions,
                                TargetPlatformCapabilities)
