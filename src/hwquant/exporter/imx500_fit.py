"""Fitting a network into the IMX500's memory, framework-free: the converter's memory report read, the next
weights budget derived from it, and the nodes of a detector's head that compute pixel coordinates (kept at
16-bit activations, as Ultralytics' IMX500 settings keep them).

The chip holds the network's weights ("Model Memory") and its activations' working set ("Runtime Memory") in
8 MB. The runtime part depends on the input size and the layers' widths, not on the weights' bit widths, and
only Sony's converter knows it exactly; so a fit is found by quantizing, converting, and, when the report says
the network does not fit, quantizing again under the weights budget the report leaves (hwquant/torch/yolo_imx500.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hwquant.core.graph.model_graph import Graph, NodeKind

CHIP_MEMORY_BYTES = 8 * 2 ** 20  # "Total Memory Available On Chip": 8.00MB
FIT_MARGIN = 0.02  # of the chip: kept free when a budget is derived (the converter's sizes round and pad)
_UNITS = {"B": 1, "KB": 2 ** 10, "MB": 2 ** 20, "GB": 2 ** 30}
# operations whose outputs are pixel coordinates in a head's box / keypoint decoding
_COORDINATE_OPS = {"add", "sub", "mul", "div", "truediv", "cat", "concat", "iadd", "isub", "imul"}


def parse_size(text: str) -> int:
    """"4.48MB" -> bytes, as the converter's memory report writes sizes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMG]?B)\s*", str(text))
    if not match:
        raise ValueError(f"not a size the IMX500 converter writes: {text!r}")
    return int(round(float(match.group(1)) * _UNITS[match.group(2)]))


@dataclass
class ChipMemory:
    """The converter's memory report, in bytes."""
    model: int
    runtime: int
    total: int
    available: int
    fits: bool

    @classmethod
    def from_report(cls, report: Dict[str, Any]) -> "ChipMemory":
        r = report.get("Memory Report", report)
        return cls(model=parse_size(r["Model Memory Physical Size"]), runtime=parse_size(r["Runtime Memory Physical Size"]),
                   total=parse_size(r["Memory Usage"]), available=parse_size(r["Total Memory Available On Chip"]),
                   fits=bool(r["Fit In Chip"]))


def read_memory_report(folder: Path) -> Optional[Dict[str, Any]]:
    """The converter's *MemoryReport.json in `folder` (None: the converter wrote none)."""
    found = sorted(Path(folder).glob("*MemoryReport.json"))
    return json.loads(found[0].read_text()) if found else None


def next_weights_budget(memory: ChipMemory, weights_figure: float) -> float:
    """The weights budget (in hwquant's figure: quantized weights' bytes) under which the network should fit,
    from a conversion that did not: the chip less the runtime memory and a margin, scaled by how the
    converter's model size relates to hwquant's figure for the same network (biases, padding)."""
    room = memory.available * (1 - FIT_MARGIN) - memory.runtime
    per_byte = memory.model / weights_figure if weights_figure > 0 else 1.0
    return room / per_byte


def pixel_coordinate_nodes(graph: Graph, n_anchors: int) -> List[str]:
    """The arithmetic nodes downstream of the head's anchor and stride constants (tensors whose last axis is
    the anchors): box corners, box scaling by the strides, keypoint offsets and their concatenations, whose
    values span the image in pixels and lose whole pixels at 8 bits."""
    readers: Dict[str, List[str]] = {}
    for node in graph:
        for name in node.inputs:
            readers.setdefault(name, []).append(node.name)
    todo = [n.name for n in graph if n.kind == NodeKind.CONSTANT and _last_dim(n.output_shape) == n_anchors]
    seen = set()
    while todo:
        for reader in readers.get(todo.pop(), []):
            if reader not in seen:
                seen.add(reader)
                todo.append(reader)
    return [n.name for n in graph if n.name in seen and _op_name(n.type) in _COORDINATE_OPS]


def _last_dim(shape: Any) -> Optional[int]:
    return int(shape[-1]) if isinstance(shape, (tuple, list)) and shape and isinstance(shape[-1], int) else None


def _op_name(op: Any) -> str:
    return str(getattr(op, "__name__", op)).strip("_").lower()


def anchors_of(imgsz: Sequence[int], strides: Sequence[float]) -> int:
    """Anchor points of a YOLO head at input size (height, width): one per cell of each stride's grid."""
    return sum(int(imgsz[0] // s) * int(imgsz[1] // s) for s in strides)
