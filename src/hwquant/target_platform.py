"""`mct.target_platform`: the older (seed) namespace of the target platform API.

Here `TargetPlatformModel` builds the hardware description from components registered inside
`with tp_model:`, and `TargetPlatformCapabilities` is that description attached to a framework's
layers (today's FrameworkQuantizationCapabilities), filled inside `with tpc:`.
"""
from hwquant.tpc.attachment import FrameworkQuantizationCapabilities as TargetPlatformCapabilities  # noqa: F401
from hwquant.tpc.attachment import OperationsSetToLayers, OperationsToLayers  # noqa: F401
from hwquant.tpc.enums import OperatorSetNames, QuantizationMethod, Signedness  # noqa: F401
from hwquant.tpc.layer_filters import (AttributeFilter, Contains, Eq, Greater, GreaterEq,  # noqa: F401
                                       LayerFilterParams, NotEq, Smaller, SmallerEq)
from hwquant.tpc.legacy import (Fusing, OperatorSetConcat, OperatorsSet, TargetPlatformModel,  # noqa: F401
                                get_default_quantization_config_options)
from hwquant.tpc.schema import AttributeQuantizationConfig, OperatorSetGroup, OpQuantizationConfig, QuantizationConfigOptions  # noqa: F401
