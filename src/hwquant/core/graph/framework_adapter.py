"""What the framework-free pipeline needs from a framework (PyTorch, Keras).

An adapter captures models into the core graph, tells a few facts about nodes that only the
framework knows (is this a batch-norm, where are a kernel's channels), runs the float model to
observe tensors, and builds models back. Everything else (graph passes, statistics, parameter
search, corrections, mixed precision) is written once in `hwquant.core` against this interface.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from hwquant.core.configuration.framework_info import FrameworkInfo
from hwquant.core.graph.model_graph import Graph, Node


def spatial_axes(rank: int, channel_axis: int) -> Tuple[int, ...]:
    """The spatial axes of an activation of this rank (batch first; every axis but batch and channels)."""
    channels = channel_axis % rank
    return tuple(a for a in range(1, rank) if a != channels)


@dataclass
class BatchNormParams:
    gamma: np.ndarray
    beta: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    eps: float


# ---- Facts and edits used by the graph corrections (hwquant.core.passes) ----
# (collapsing, ReLU bound, shift-negative correction, channel equalization, input scaling, bias correction)
@dataclass
class LinearGeometry:
    """How a kernel layer maps its input: a dense layer (acting on the last axis), a convolution or
    a transposed convolution (channels at the adapter's activation_channel_axis). Spatial fields have
    one entry per spatial dim, in axis order."""

    kind: str                                       # "dense" | "conv" | "conv_transpose"
    in_channels: int
    out_channels: int
    kernel_size: Tuple[int, ...] = ()
    stride: Tuple[int, ...] = ()
    padding: Tuple[Tuple[int, int], ...] = ()       # (before, after) per spatial dim
    dilation: Tuple[int, ...] = ()
    groups: int = 1
    padding_mode: str = "zeros"                     # "zeros" | "reflect" | "replicate" | "circular"

    @property
    def zero_padding(self) -> bool:
        return self.padding_mode == "zeros"

    @property
    def is_dense(self) -> bool:
        return self.kind == "dense"

    @property
    def is_conv(self) -> bool:
        return self.kind == "conv"

    @property
    def has_padding(self) -> bool:
        return any(lo or hi for lo, hi in self.padding)

    @property
    def is_pointwise(self) -> bool:
        """A 1x1 convolution with stride 1 and no padding (or a dense layer)."""
        return self.is_dense or (self.is_conv and all(k == 1 for k in self.kernel_size)
                                 and all(s == 1 for s in self.stride) and not self.has_padding)


@dataclass
class ActivationInfo:
    """An element-wise activation. `name` is canonical ('relu', 'relu6', 'hardtanh', 'leaky_relu',
    'prelu', 'silu', 'gelu', 'hardswish', 'elu', 'mish', ...); `lower` / `upper` are the bounds its
    output is clipped to (None: unbounded); `positive_homogeneous`: f(a * x) == a * f(x) for a > 0."""

    name: str
    lower: Optional[float] = None
    upper: Optional[float] = None
    positive_homogeneous: bool = False


class CorrectionFacts(Protocol):
    """What the graph corrections ask the framework adapter (part of FrameworkAdapter)."""

    def linear_geometry(self, node: Node) -> Optional[LinearGeometry]:
        """The geometry of a dense / convolution / transposed-convolution layer, else None."""

    def canonical_kernel(self, node: Node, kernel: np.ndarray) -> np.ndarray:
        """A kernel of this dense / convolution node in the core's layout, the one the corrections compute
        in: dense (out, in); convolution (out, in / groups, *spatial); transposed convolution
        (in, out / groups, *spatial). (PyTorch's own layouts; another framework transposes.)"""

    def framework_kernel(self, node: Node, kernel: np.ndarray) -> np.ndarray:
        """The inverse of canonical_kernel: a kernel in the core's layout as this node's framework holds it."""

    def set_linear_layer(self, node: Node, kernel: np.ndarray, bias: Optional[np.ndarray],
                         geometry: Optional[LinearGeometry] = None) -> None:
        """Give the node a fresh layer of its class with this kernel, bias (None: no bias) and
        geometry (None: the node's own, with in/out channels taken from the kernel); updates the
        node's weights, call target and framework attributes."""

    def operator_set(self, node: Node) -> Optional[str]:
        """The operator set (OperatorSetNames value) the framework's own table puts the node in, whatever the TPC
        defines: what kind of operation it is (structured pruning's channel-wise layers)."""

    def is_flatten(self, node: Node) -> bool:
        """A flatten in the framework's own order (row-major over the axes it flattens)."""

    def keep_channels(self, node: Node, kept: np.ndarray) -> None:
        """Give a per-channel layer with weights (a batch norm, a PReLU) only the channels ``kept`` (sorted
        indices): its weights and its layer's channel count (structured pruning)."""

    def activation_info(self, node: Node) -> Optional[ActivationInfo]:
        """The node's element-wise activation, or None if it is not one."""

    def set_activation_bounds(self, node: Node, lower: float, upper: float) -> None:
        """Make the node a clipping activation (hardtanh) with these bounds."""

    def is_add(self, node: Node) -> bool:
        """Whether the node adds its two (distinct) input tensors, nothing else (no alpha)."""

    def commutes_with_shift(self, node: Node) -> bool:
        """f(x + c) == f(x) + c for any scalar c (layout ops, dropout, identity, max-pooling, ...)."""

    def commutes_with_channel_scale(self, node: Node) -> bool:
        """f(x * s) == f(x) * s for positive per-channel s along the channel axis (zero padding, pooling, ...)."""

    def add_constant_node(self, name: str, input_name: str, value: float, output_shape: Any) -> Node:
        """A new node computing input + value (not yet in any graph)."""

    def pad_node(self, name: str, input_name: str, padding: Sequence[Tuple[int, int]], value: float,
                 output_shape: Any) -> Node:
        """A new node padding the spatial dims of its input ((before, after) per spatial dim, the
        first spatial dim first) with a constant value."""


class FrameworkAdapter(CorrectionFacts, Protocol):
    name: str
    fw_info: FrameworkInfo
    # The channel axis of activations (PyTorch 1, channels first; Keras -1, channels last): per-channel
    # statistics, and the convolutions' channels. A dense layer always reads the last axis.
    activation_channel_axis: int
    # The processes this run spans (core/pipeline/distributed.py): SINGLE_PROCESS unless the framework's own
    # multi-process runtime is initialised (torch.distributed)
    collective: Any

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

    def matrix_weights(self, node: Node) -> Dict[Any, int]:
        """The weight matrices of a layer no TPC operator set lists, which multiply its inputs as a fully
        connected layer's kernel does (a recurrent layer's input and recurrent kernels, an embedding
        table: a one-hot product), each with its output-channel axis; {} for any other node."""

    def is_zero_padding(self, node: Node) -> bool:
        """Whether the node only pads its input with zeros (Keras' ZeroPadding2D, torch's ZeroPad2d or F.pad
        with value 0): resource figures count one read by a convolution as that convolution's padding."""

    def output_range(self, node: Node) -> Optional[Tuple[Optional[float], Optional[float]]]:
        """(min, max) the node's operator bounds its output to (softmax, sigmoid (0, 1); tanh (-1, 1); None
        on an unbounded side), from the FrameworkInfo's layer / activation min-max mappings; None when
        unknown. Activation thresholds then span it (core/statistics/parameter_search.py): no statistic narrows a known range."""

    def collect_statistics(self, graph: Graph, statistics: Dict[str, Any], data: Iterable[List[Any]],
                           quantized: bool = False) -> int:
        """Run the model of `graph` on `data` and add each batch of every node named in `statistics`
        to its TensorStatistics (summarised on the framework side, for speed); returns the number
        of batches."""

    def sensitivity_backend(self) -> Any:
        """The primitives of the mixed-precision sensitivity loop (a
        core.mixed_precision.measurement.SensitivityBackend)."""

    def build(self, graph: Graph, quantized: bool) -> Any:
        """The framework model of `graph` (quantized: with the nodes' final quantization)."""

    def fake_quantized_model(self, graph: Graph) -> Any:
        """The quantized model on the framework's float path (fake-quantized kernels), for measuring
        output errors: the same outputs as ``build(graph, quantized=True)`` up to float rounding."""

    def node_runner(self, graph: Graph) -> Any:
        """The fake-quantized model of `graph` run one node at a time (a ``NodeRunner`` of
        core/passes/output_mean_correction.py: the measured bias correction)."""

    def relative_output_errors(self, reference: Any, models: Sequence[Any], data: Iterable[List[Any]],
                               max_samples: int) -> List[float]:
        """Each model's squared output error against ``reference``'s over its output energy, on the
        first ``max_samples`` samples of ``data`` (whole batches)."""
