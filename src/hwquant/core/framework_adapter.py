"""What the framework-free pipeline needs from a framework (PyTorch, Keras).

An adapter captures models into the core graph, tells a few facts about nodes that only the
framework knows (is this a batch-norm, where are a kernel's channels), runs the float model to
observe tensors, and builds models back. Everything else (graph passes, statistics, parameter
search, corrections, mixed precision) is written once in `hwquant.core` against this interface.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from hwquant.core.framework_info import FrameworkInfo
from hwquant.core.graph import Graph, Node


@dataclass
class BatchNormParams:
    gamma: np.ndarray
    beta: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    eps: float


class FrameworkAdapter(Protocol):
    name: str
    fw_info: FrameworkInfo

    def attach(self, tpc: Any, custom_opset_to_layer: Optional[Dict[str, Any]] = None) -> Any:
        """The TPC attached to this framework's layers (a FrameworkQuantizationCapabilities)."""

    def batch_norm_params(self, node: Node) -> Optional[BatchNormParams]:
        """The node's batch-norm parameters, or None if it is not a (foldable) batch-norm."""

    def kernel_axes(self, node: Node) -> Optional[Tuple[int, int]]:
        """(output-channel axis, input-channel axis) of the node's kernel, or None if it has none."""

    def kernel_attr(self, node: Node) -> Optional[str]:
        """Name of the node's kernel weight ('weight' in PyTorch), or None."""

    def bias_attr(self, node: Node) -> Optional[str]:
        """Name of the node's bias weight, or None if the node cannot carry one."""

    def collect(self, graph: Graph, node_names: Sequence[str], data: Iterable[List[Any]],
                consume: Callable[[str, np.ndarray], None], quantized: bool = False) -> int:
        """Run the (float or quantized) model of `graph` on `data`, calling consume(node, tensor)
        for every requested node's output of every batch; returns the number of batches."""

    def build(self, graph: Graph, quantized: bool) -> Any:
        """The framework model of `graph` (quantized: with the nodes' final quantization)."""
