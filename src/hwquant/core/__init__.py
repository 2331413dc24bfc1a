"""`mct.core`: configuration of the quantization process and the framework-free machinery.

Nothing under `hwquant.core` imports torch, tensorflow or keras (a test enforces it).
"""
from hwquant.core import network_editor
from hwquant.core.config import (BitWidthConfig, CoreConfig, DebugConfig, DefaultDict, ManualBitWidthSelection,
                                 ManualWeightsBitWidthSelection, MixedPrecisionQuantizationConfig,
                                 MpDistanceWeighting, MpMetricNormalization, QuantizationConfig,
                                 QuantizationErrorMethod, ResourceUtilization, RUTarget, ThresholdSelectionMethod,
                                 UserInformation)
from hwquant.core.framework_info import FrameworkInfo
