"""`mct.core`: configuration of the quantization process and the framework-free machinery.

Nothing under `hwquant.core` imports torch, tensorflow or keras (a test enforces it).
"""
from hwquant.core.configuration import network_editor, quantization_config  # noqa: F401 (MCT's modules)
from hwquant.core.configuration.config import (BitWidthConfig, CoreConfig, DebugConfig, DefaultDict, ManualBitWidthSelection,
                                               ManualWeightsBitWidthSelection, MixedPrecisionQuantizationConfig,
                                               MpDistanceWeighting, MpMetricNormalization, QuantizationConfig,
                                               QuantizationErrorMethod, ResourceUtilization, RUTarget, ThresholdSelectionMethod,
                                               UserInformation)
from hwquant.core.configuration.framework_info import FrameworkInfo
from hwquant.core.configuration.quantization_config import DEFAULTCONFIG, ChannelAxis, CustomOpsetLayers  # noqa: F401
from hwquant.lazy import lazy_table

_FACADES = {"pytorch_resource_utilization_data": "hwquant.torch.facade",
            "keras_resource_utilization_data": "hwquant.keras.facade"}
_facade, _facade_names = lazy_table(__name__, _FACADES)


def __getattr__(name: str):
    # framework facades live with their framework, loaded on first use; MCT's module paths
    # (core.common.network_editors, core.mixed_precision_quantization_config) are in hwquant/mct_paths.py
    return _facade(name)
