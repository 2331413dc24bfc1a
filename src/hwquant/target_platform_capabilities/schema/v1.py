"""Schema version 1, MCT's `schema.v1`, which TPC modules written for MCT 2.3-2.5 build with
(edge-mdt-tpc's IMX500 1.0 and 4.x among them).

Version 2 only added to version 1 (`insert_preserving_quantizers`, a fused operator's config, more
operator-set names), so the components are the current ones; a TPC built here says
`SCHEMA_VERSION == 1` and cannot ask for what version 1 lacks. hwquant's facades take it as it is;
its JSON loads through the v1 -> v2 migration of `hwquant.tpc.serialization`.
"""
from typing import Literal

from hwquant.target_platform_capabilities.schema import mct_current_schema as _current
from hwquant.target_platform_capabilities.schema.mct_current_schema import (AttributeQuantizationConfig,  # noqa: F401
                                                                            Fusing, OperatorSetGroup, OperatorSetNames,
                                                                            OperatorsSet, OpQuantizationConfig,
                                                                            QuantizationConfigOptions,
                                                                            QuantizationMethod, Signedness)

SCHEMA_VERSION = 1


class TargetPlatformCapabilities(_current.TargetPlatformCapabilities):
    __doc__ = (_current.TargetPlatformCapabilities.__doc__ or "") + " (schema version 1)"

    insert_preserving_quantizers: Literal[False] = False  # version 1 has no preserving quantizers
    SCHEMA_VERSION: Literal[1] = SCHEMA_VERSION  # type: ignore[assignment]


__all__ = [*_current.__all__]
