"""Sony's edge-mdt-cl layers (`edgemdt_cl.pytorch`: MulticlassNMS, MulticlassNMSWithIndices, MulticlassNMSOBB,
FasterRCNNBoxDecode, and any subclass of its CustomLayer): custom operators made for the IMX500 converter.
Every capture route keeps such a layer whole (one node, marked opaque: nothing of it or its outputs is
quantized), the quantized model calls the layer as it is, and the ONNX export writes its own operator
(edge-mdt-cl's symbolic, domain EdgeMDT).

Recognised by the classes' module, so that edgemdt_cl is never imported here: a model holding one has
imported it already."""
from __future__ import annotations

from typing import Any, Dict

from torch import nn

from hwquant.tpc.layer_filters import LayerFilterParams

_PACKAGE = "edgemdt_cl.pytorch"
# edge-mdt-cl's non-maximum suppression layers (the TPC's CombinedNonMaxSuppression operator set)
NMS_CLASS_NAMES = frozenset({"MulticlassNMS", "MulticlassNMSWithIndices", "MulticlassNMSOBB"})


def _edgemdt_classes(layer_type: Any) -> list:
    if not isinstance(layer_type, type):
        return []
    return [c for c in layer_type.__mro__ if getattr(c, "__module__", "").startswith(_PACKAGE)]


def is_custom_layer(module: Any) -> bool:
    """Whether `module` is one of edge-mdt-cl's layers (or a subclass of one)."""
    return isinstance(module, nn.Module) and bool(_edgemdt_classes(type(module)))


class EdgeMdtNMSFilter(LayerFilterParams):
    """Attaches edge-mdt-cl's NMS layers (and their subclasses) to an operator set without importing the
    package: matches a layer type by its classes' names and module."""

    def __init__(self) -> None:
        super().__init__(None)

    def match(self, layer_type: Any, attrs: Dict[str, Any]) -> bool:
        return any(c.__name__ in NMS_CLASS_NAMES for c in _edgemdt_classes(layer_type))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, EdgeMdtNMSFilter)

    def __hash__(self) -> int:
        return hash(EdgeMdtNMSFilter)

    def __repr__(self) -> str:
        return "edgemdt_cl." + "/".join(sorted(NMS_CLASS_NAMES))
