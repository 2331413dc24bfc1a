"""`mct.target_platform`: the older (seed) namespace of the target platform API.

Here `TargetPlatformModel` is the hardware description and `TargetPlatformCapabilities` is that
description attached to a framework's layers (today's FrameworkQuantizationCapabilities).
"""
from hwquant.tpc.attachment import FrameworkQuantizationCapabilities as TargetPlatformCapabilities  # noqa: F401
from hwquant.tpc.attachment import OperationsSetToLayers, OperationsToLayers  # noqa: F401
from hwquant.tpc.enums import OperatorSetNames, QuantizationMethod, Signedness  # noqa: F401
from hwquant.tpc.layer_filters import (AttributeFilter, Contains, Eq, Greater, GreaterEq,  # noqa: F401
                                       LayerFilterParams, NotEq, Smaller, SmallerEq)
from hwquant.tpc.schema import (AttributeQuantizationConfig, Fusing, OperatorSetGroup, OperatorsSet,  # noqa: F401
                                OpQuantizationConfig, QuantizationConfigOptions)
from hwquant.tpc.schema import OperatorSetGroup as OperatorSetConcat  # noqa: F401
from hwquant.tpc.schema import TargetPlatformCapabilities as TargetPlatformModel  # noqa: F401
