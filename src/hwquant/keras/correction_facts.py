"""The Keras side of the graph corrections (`CorrectionFacts` in core/graph/framework_adapter.py): layer
geometry (channels last; 'same' padding as Keras computes it, the odd pixel after), kernel layers
rebuilt with new weights, activations and their bounds, which layers commute with a shift or a
per-channel scale, and the nodes the corrections insert (a constant add, a constant pad), as
keras.ops calls. Mixed into `KerasAdapter`, which sets `graph` (input shapes for 'same' padding)."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple

import keras
import numpy as np
from keras import layers as L
from keras.src.ops import nn as NN
from keras.src.ops import numpy as NP

from hwquant.core.graph.framework_adapter import ActivationInfo, LinearGeometry
from hwquant.core.graph.model_graph import InputRef, Node, NodeKind

_CONVS = (L.Conv1D, L.Conv2D, L.Conv3D)
_DEPTHWISE = (L.DepthwiseConv1D, L.DepthwiseConv2D)
_TRANSPOSED = (L.Conv1DTranspose, L.Conv2DTranspose, L.Conv3DTranspose)
KERNEL_LAYERS = (*_CONVS, *_DEPTHWISE, *_TRANSPOSED, L.Dense, L.EinsumDense)  # the layers whose 'kernel' is quantized
# Activation(name) / keras.ops function -> (canonical name, positive homogeneous)
_ACTIVATIONS = {"relu": ("relu", True), "leaky_relu": ("leaky_relu", True), "silu": ("silu", False),
                "swish": ("silu", False), "gelu": ("gelu", False), "hard_silu": ("hardswish", False),
                "hard_swish": ("hardswish", False), "elu": ("elu", False), "sigmoid": ("sigmoid", False),
                "tanh": ("tanh", False), "hard_sigmoid": ("hardsigmoid", False), "mish": ("mish", False)}
_ACTIVATION_OPS = {NN.Relu: "relu", NN.LeakyRelu: "leaky_relu", NN.Silu: "silu", NN.Gelu: "gelu",
                   NN.HardSilu: "hard_silu", NN.Elu: "elu", NN.Sigmoid: "sigmoid", NN.HardSigmoid: "hard_sigmoid"}
_SHIFT_COMMUTING = (L.Dropout, L.Identity, L.Flatten, L.Reshape, L.Permute, L.MaxPooling1D, L.MaxPooling2D,
                    L.MaxPooling3D, L.GlobalMaxPooling1D, L.GlobalMaxPooling2D, L.GlobalAveragePooling1D,
                    L.GlobalAveragePooling2D, NP.Reshape, NP.Transpose, NP.ExpandDims, NP.Squeeze)
_CHANNEL_SCALE_COMMUTING = (L.Dropout, L.Identity, L.ZeroPadding1D, L.ZeroPadding2D, L.MaxPooling1D, L.MaxPooling2D,
                            L.MaxPooling3D, L.AveragePooling1D, L.AveragePooling2D, L.AveragePooling3D,
                            L.GlobalAveragePooling1D, L.GlobalAveragePooling2D, L.GlobalMaxPooling1D,
                            L.GlobalMaxPooling2D)


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> Tuple[int, int]:
    """Keras' 'same' padding of one spatial dim: the odd pixel goes after."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


class KerasCorrectionFacts:
    graph: Any = None  # the graph being quantized (set by the adapter's user): input shapes

    def _input_shape(self, node: Node) -> Optional[tuple]:
        if self.graph is None or len(node.inputs) != 1 or node.inputs[0] not in self.graph:
            return None
        shape = self.graph.node(node.inputs[0]).output_shape
        return shape if isinstance(shape, tuple) else None

    def linear_geometry(self, node: Node) -> Optional[LinearGeometry]:
        if node.kind != NodeKind.MODULE or "kernel" not in node.weights:
            return None
        cfg, kernel = node.framework_attr, node.weights["kernel"]
        if node.type is L.Dense:
            return LinearGeometry("dense", kernel.shape[0], kernel.shape[1])
        if not issubclass(node.type, (*_CONVS, *_DEPTHWISE)) or cfg.get("data_format", "channels_last") != "channels_last":
            return None  # transposed convolutions and channels-first layers: no corrections reshape them
        shape, n = self._input_shape(node), kernel.ndim - 2
        if shape is None or len(shape) != n + 2:
            return None
        size, stride, dilation = kernel.shape[:n], tuple(cfg["strides"]), tuple(cfg["dilation_rate"])
        if cfg["padding"] == "valid":
            padding = tuple((0, 0) for _ in range(n))
        elif cfg["padding"] == "same":
            padding = tuple(_same_padding(shape[1 + d], size[d], stride[d], dilation[d]) for d in range(n))
        else:
            return None
        if issubclass(node.type, _DEPTHWISE):
            channels = kernel.shape[-2]
            return LinearGeometry("conv", channels, channels * kernel.shape[-1], size, stride, padding, dilation,
                                  groups=channels)
        groups = int(cfg.get("groups", 1))
        return LinearGeometry("conv", kernel.shape[-2] * groups, kernel.shape[-1], size, stride, padding, dilation,
                              groups=groups)

    def set_linear_layer(self, node: Node, kernel: np.ndarray, bias: Optional[np.ndarray],
                         geometry: Optional[LinearGeometry] = None) -> None:
        cfg = dict(node.framework_attr)
        cfg["use_bias"] = bias is not None
        if geometry is not None and node.type is not L.Dense:
            shape = self._input_shape(node)
            same = shape is not None and geometry.padding == tuple(
                _same_padding(shape[1 + d], k, s, dl)
                for d, (k, s, dl) in enumerate(zip(geometry.kernel_size, geometry.stride, geometry.dilation)))
            if all(lo == hi == 0 for lo, hi in geometry.padding):
                cfg["padding"] = "valid"
            elif same:
                cfg["padding"] = "same"
            else:
                raise ValueError(f"node '{node.name}': Keras convolutions pad 'valid' or 'same', not {geometry.padding}")
            cfg["strides"], cfg["kernel_size"] = tuple(geometry.stride), tuple(geometry.kernel_size)
            cfg["dilation_rate"] = tuple(geometry.dilation)
        if node.type is L.Dense:
            cfg["units"] = int(kernel.shape[1])
        elif issubclass(node.type, _DEPTHWISE):
            cfg["depth_multiplier"] = int(kernel.shape[-1])
        else:
            cfg["filters"] = int(kernel.shape[-1])
        node.framework_attr = cfg
        node.weights = {"kernel": np.asarray(kernel, np.float32)}
        if bias is not None:
            node.weights["bias"] = np.asarray(bias, np.float32)

    def activation_info(self, node: Node) -> Optional[ActivationInfo]:
        cfg = node.framework_attr
        if node.kind == NodeKind.MODULE and node.type is L.ReLU:
            if cfg.get("negative_slope", 0.0) or cfg.get("threshold", 0.0):
                return None
            top = cfg.get("max_value")
            return ActivationInfo("relu" if top is None else ("relu6" if top == 6.0 else "hardtanh"), 0.0,
                                  None if top is None else float(top), top is None)
        name = (cfg.get("activation") if node.kind == NodeKind.MODULE and node.type is L.Activation
                else _ACTIVATION_OPS.get(node.type) if node.kind == NodeKind.FUNCTION else None)
        if name == "relu6":
            return ActivationInfo("relu6", 0.0, 6.0)
        if name not in _ACTIVATIONS:
            return None
        canonical, homogeneous = _ACTIVATIONS[name]
        return ActivationInfo(canonical, 0.0 if canonical == "relu" else None, None, homogeneous)

    def is_flatten(self, node: Node) -> bool:
        # (channels_first: Keras moves the channels last before flattening, not the order of the tensor)
        return node.kind == NodeKind.MODULE and node.type is L.Flatten \
            and node.framework_attr.get("data_format") != "channels_first"

    def keep_channels(self, node: Node, kept: np.ndarray) -> None:
        # (channels last; a Keras layer takes its channel count from its input, so only the weights change)
        channels = node.output_shape[-1]
        node.weights = {k: np.take(w, kept, axis=-1) if np.ndim(w) >= 1 and np.shape(w)[-1] == channels else w
                        for k, w in node.weights.items()}

    def set_activation_bounds(self, node: Node, lower: float, upper: float) -> None:
        if lower != 0:
            raise ValueError(f"node '{node.name}': Keras' ReLU clips at 0 from below, not at {lower}")
        layer = L.ReLU(max_value=float(upper), name=node.name)
        node.kind, node.type, node.call_target, node.weights = NodeKind.MODULE, L.ReLU, layer, {}
        node.framework_attr = layer.get_config()
        node.call_args, node.call_kwargs = (InputRef(0),), {}

    def is_add(self, node: Node) -> bool:
        if len(node.inputs) != 2 or len(set(node.inputs)) != 2:
            return False
        if node.kind == NodeKind.MODULE:
            return node.type is L.Add
        return node.kind == NodeKind.FUNCTION and node.type is NP.Add

    def commutes_with_shift(self, node: Node) -> bool:
        return isinstance(node.type, type) and issubclass(node.type, _SHIFT_COMMUTING)

    def commutes_with_channel_scale(self, node: Node) -> bool:
        return isinstance(node.type, type) and issubclass(node.type, _CHANNEL_SCALE_COMMUTING)

    def add_constant_node(self, name: str, input_name: str, value: float, output_shape: Any) -> Node:
        return Node(name, NodeKind.FUNCTION, NP.Add, [input_name], {}, {}, keras.ops.add,
                    (InputRef(0), float(value)), {}, output_shape)

    def pad_node(self, name: str, input_name: str, padding: Sequence[Tuple[int, int]], value: float,
                 output_shape: Any) -> Node:
        width = ((0, 0), *(tuple(p) for p in padding), (0, 0))  # batch, spatial..., channels
        return Node(name, NodeKind.FUNCTION, NP.Pad, [input_name], {}, {}, keras.ops.pad, (InputRef(0), width),
                    {"constant_values": float(value)}, output_shape)
