"""Keep the quantized model's metadata (``core.model_metadata``) on the module, surviving
``copy.deepcopy`` (which rebuilds a GraphModule from its graph and drops plain attributes)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from torch import fx, nn

from hwquant.core.pipeline.model_metadata import METADATA_ATTR

# torch.fx restores the attributes listed in GraphModule.meta under this key after a deepcopy.
_PRESERVED = "_user_preserved_attributes"


def attach_metadata(model: nn.Module, metadata: Dict[str, Any]) -> None:
    setattr(model, METADATA_ATTR, metadata)
    if isinstance(model, fx.GraphModule):
        model.meta.setdefault(_PRESERVED, {})[METADATA_ATTR] = metadata


def read_metadata(model: nn.Module) -> Optional[Dict[str, Any]]:
    """The metadata of `model`, or of the quantized model it holds (a caller's wrapper around it, such as
    Ultralytics' NMS layer): the first module, in `modules()` order, that carries it."""
    return next((found for m in model.modules() if (found := getattr(m, METADATA_ATTR, None)) is not None), None)
