"""The current TPC schema under the documented module path: its classes, and `schema`, the module of the
current schema version (`schema.v2`), as in MCT (`mct_current_schema.schema.TargetPlatformCapabilities`)."""
from hwquant.target_platform_capabilities.schema import v2 as schema
from hwquant.target_platform_capabilities.schema.v2 import (SCHEMA_VERSION, AttributeQuantizationConfig,  # noqa: F401
                                                            Fusing, OperatorSetGroup, OperatorSetNames, OperatorsSet,
                                                            OpQuantizationConfig, QuantizationConfigOptions,
                                                            QuantizationMethod, Signedness, TargetPlatformCapabilities)

__all__ = [*schema.__all__]
