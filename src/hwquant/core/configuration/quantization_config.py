"""`mct.core.quantization_config` (MCT's module of that name): the quantization-process settings."""
from enum import IntEnum
from typing import Any, Dict, NamedTuple, Optional, Sequence

from hwquant.core.configuration.config import QuantizationConfig, QuantizationErrorMethod  # noqa: F401 (re-exported)


class ChannelAxis(IntEnum):
    """Where a tensor's channels are: last (NHWC, Keras) or second (NCHW, PyTorch)."""

    NHWC = -1
    NCHW = 1


class CustomOpsetLayers(NamedTuple):
    """A value of ``QuantizationConfig.custom_tpc_opset_to_layer``: the framework operators an
    operator set attaches to, and optionally the names of their weight attributes
    (``{TPC attribute name: framework attribute name}``)."""

    operators: Sequence[Any]
    attr_mapping: Optional[Dict[str, Any]] = None


DEFAULTCONFIG = QuantizationConfig()
