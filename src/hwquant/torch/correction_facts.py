"""The PyTorch side of the graph corrections (`CorrectionFacts` in core/graph/framework_adapter.py):
layer geometry, rebuilding a kernel layer with new weights, what an activation is and its bounds,
which ops commute with a shift or a per-channel scale, and the nodes the corrections insert (a
constant add, a constant pad). Mixed into `PytorchAdapter`."""
from __future__ import annotations

import copy
import inspect
import operator
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hwquant.core.graph.framework_adapter import ActivationInfo, LinearGeometry
from hwquant.core.graph.model_graph import InputRef, Node, NodeKind
from hwquant.torch.capture.fx_graph import module_framework_attr, module_weights

T = torch.Tensor
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_TRANSPOSED = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)

# canonical name, positive homogeneous
_ACTIVATION_MODULES = [
    (nn.ReLU, "relu", True), (nn.LeakyReLU, "leaky_relu", True), (nn.PReLU, "prelu", True),
    (nn.SiLU, "silu", False), (nn.GELU, "gelu", False), (nn.Hardswish, "hardswish", False),
    (nn.ELU, "elu", False), (nn.Mish, "mish", False), (nn.CELU, "celu", False), (nn.SELU, "selu", False),
    (nn.Sigmoid, "sigmoid", False), (nn.Tanh, "tanh", False), (nn.Hardsigmoid, "hardsigmoid", False),
]
_ACTIVATION_FUNCTIONS = {
    F.relu: ("relu", True), torch.relu: ("relu", True), T.relu: ("relu", True),
    F.leaky_relu: ("leaky_relu", True), F.prelu: ("prelu", True), F.silu: ("silu", False),
    F.gelu: ("gelu", False), F.hardswish: ("hardswish", False), F.elu: ("elu", False), F.mish: ("mish", False),
    torch.sigmoid: ("sigmoid", False), F.sigmoid: ("sigmoid", False), T.sigmoid: ("sigmoid", False),
    torch.tanh: ("tanh", False), F.tanh: ("tanh", False), T.tanh: ("tanh", False),
    F.hardsigmoid: ("hardsigmoid", False),
    torch.sqrt: ("sqrt", False), T.sqrt: ("sqrt", False), torch.exp: ("exp", False), T.exp: ("exp", False),
}
_SHIFT_COMMUTING_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.Identity, nn.Flatten,
                            nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
                            nn.AdaptiveMaxPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)
_SHIFT_COMMUTING_CALLS = {torch.flatten, torch.reshape, torch.permute, torch.transpose, torch.squeeze, torch.unsqueeze,
                          F.dropout, F.max_pool1d, F.max_pool2d, F.max_pool3d, F.adaptive_avg_pool1d,
                          F.adaptive_avg_pool2d, F.adaptive_avg_pool3d, F.adaptive_max_pool2d,
                          T.flatten, T.reshape, T.view, T.permute, T.transpose, T.squeeze, T.unsqueeze, T.contiguous}
_AVG_POOLS = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
_CHANNEL_SCALE_COMMUTING_MODULES = (nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d, nn.Dropout, nn.Dropout1d, nn.Dropout2d,
                                    nn.Dropout3d, nn.Identity, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, *_AVG_POOLS,
                                    nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
                                    nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
_CHANNEL_SCALE_COMMUTING_CALLS = {F.dropout, F.max_pool1d, F.max_pool2d, F.max_pool3d, F.avg_pool1d, F.avg_pool2d,
                                  F.avg_pool3d, F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d}
_ADDS = {operator.add, torch.add, T.add}


def _tuple(v: Any, n: int) -> Tuple[int, ...]:
    return tuple(int(x) for x in v) if isinstance(v, (tuple, list)) else (int(v),) * n


def _same_padding(kernel_size: Sequence[int], dilation: Sequence[int]) -> Tuple[Tuple[int, int], ...]:
    """torch's 'same' padding (stride 1): total d * (k - 1) per dimension, the smaller half before."""
    return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel_size, dilation))


def _member(value: Any, table: Any) -> bool:
    """`value in table`; False for an unhashable value (a node type that is no layer or function)."""
    try:
        return value in table
    except TypeError:
        return False


def _bound_arguments(node: Node) -> Optional[Dict[str, Any]]:
    """The call's arguments by parameter name (function nodes), or None if they cannot be bound."""
    try:
        return dict(inspect.signature(node.call_target).bind(*node.call_args, **node.call_kwargs).arguments)
    except (TypeError, ValueError):
        return None


class PytorchCorrectionFacts:
    """Implements core.graph.framework_adapter.CorrectionFacts for PyTorch (a mixin of PytorchAdapter)."""

    # ---- kernel layers ---------------------------------------------------------------------------
    def linear_geometry(self, node: Node) -> Optional[LinearGeometry]:
        m = node.call_target
        if node.kind != NodeKind.MODULE:
            return None
        if isinstance(m, nn.Linear):
            return LinearGeometry("dense", m.in_features, m.out_features)
        if isinstance(m, _CONVS + _TRANSPOSED):
            n = len(m.kernel_size)
            k, s, d = _tuple(m.kernel_size, n), _tuple(m.stride, n), _tuple(m.dilation, n)
            if isinstance(m.padding, str):
                pad = ((0, 0),) * n if m.padding == "valid" else _same_padding(k, d)
            else:
                pad = tuple((p, p) for p in _tuple(m.padding, n))
            kind = "conv_transpose" if isinstance(m, _TRANSPOSED) else "conv"
            return LinearGeometry(kind, m.in_channels, m.out_channels, k, s, pad, d, int(m.groups),
                                  padding_mode=getattr(m, "padding_mode", "zeros"))
        return None

    def canonical_kernel(self, node: Node, kernel: np.ndarray) -> np.ndarray:
        return kernel  # the core's layout is PyTorch's

    def framework_kernel(self, node: Node, kernel: np.ndarray) -> np.ndarray:
        return kernel

    def set_linear_layer(self, node: Node, kernel: np.ndarray, bias: Optional[np.ndarray],
                         geometry: Optional[LinearGeometry] = None) -> None:
        old = node.call_target
        g = geometry or self.linear_geometry(node)
        if g is None:
            raise ValueError(f"node '{node.name}' is not a dense / convolution layer")
        kernel = np.asarray(kernel, dtype=np.float32)
        use_bias = bias is not None
        if g.is_dense:
            new = nn.Linear(kernel.shape[1], kernel.shape[0], bias=use_bias, device="meta")
        elif g.kind == "conv":
            lo, hi = zip(*g.padding) if g.padding else ((), ())
            if lo == hi:
                padding: Any = tuple(lo)
            elif all(s == 1 for s in g.stride) and g.padding == _same_padding(g.kernel_size, g.dilation):
                padding = "same"
            else:
                raise ValueError(f"node '{node.name}': PyTorch convolutions cannot pad {g.padding} (asymmetric)")
            new = type(old)(kernel.shape[1] * g.groups, kernel.shape[0], g.kernel_size, stride=g.stride,
                            padding=padding, dilation=g.dilation, groups=g.groups, bias=use_bias,
                            padding_mode=g.padding_mode, device="meta")
        else:
            if any(lo != hi for lo, hi in g.padding):
                raise ValueError(f"node '{node.name}': transposed convolutions pad symmetrically")
            new = type(old)(kernel.shape[0], kernel.shape[1] * g.groups, g.kernel_size, stride=g.stride,
                            padding=tuple(lo for lo, _ in g.padding), output_padding=old.output_padding,
                            groups=g.groups, bias=use_bias, dilation=g.dilation, device="meta")
        # (made on the meta device, then given memory: a random initialisation would draw from torch's
        # process-wide generator, changing the caller's and other threads' random numbers)
        new = new.to_empty(device="cpu")
        with torch.no_grad():
            if tuple(new.weight.shape) != kernel.shape:
                raise ValueError(f"node '{node.name}': kernel of shape {kernel.shape} does not fit the geometry "
                                 f"(expected {tuple(new.weight.shape)})")
            new.weight.copy_(torch.as_tensor(kernel))
            if use_bias:
                new.bias.copy_(torch.as_tensor(np.asarray(bias, dtype=np.float32).reshape(-1)))
        new.train(old.training if isinstance(old, nn.Module) else False)
        node.call_target = new
        node.weights = module_weights(new)
        node.framework_attr = module_framework_attr(new)

    # ---- activations -----------------------------------------------------------------------------
    def activation_info(self, node: Node) -> Optional[ActivationInfo]:
        if node.kind == NodeKind.MODULE:
            m = node.call_target
            if isinstance(m, nn.ReLU6):
                return ActivationInfo("relu6", 0.0, 6.0)
            if isinstance(m, nn.Hardtanh):
                return ActivationInfo("hardtanh", float(m.min_val), float(m.max_val))
            for cls, name, homogeneous in _ACTIVATION_MODULES:
                if isinstance(m, cls):
                    return ActivationInfo(name, 0.0 if name == "relu" else None, None, homogeneous)
            return None
        if node.kind not in (NodeKind.FUNCTION, NodeKind.METHOD):
            return None
        if node.type in (F.relu6, F.hardtanh) and node.kind == NodeKind.FUNCTION:
            args = _bound_arguments(node)
            if args is None:
                return None
            if node.type is F.relu6:
                return ActivationInfo("relu6", 0.0, 6.0)
            return ActivationInfo("hardtanh", float(args.get("min_val", -1.0)), float(args.get("max_val", 1.0)))
        if not _member(node.type, _ACTIVATION_FUNCTIONS):
            return None
        name, homogeneous = _ACTIVATION_FUNCTIONS[node.type]
        return ActivationInfo(name, 0.0 if name == "relu" else None, None, homogeneous)

    def is_flatten(self, node: Node) -> bool:
        if node.kind == NodeKind.MODULE:
            return isinstance(node.call_target, nn.Flatten)
        if node.call_target is torch.flatten or (node.kind == NodeKind.METHOD and node.call_target == "flatten"):
            return True
        # x.view(x.size(0), -1) / x.reshape(batch, -1): the features left to -1 (a fixed count would break when
        # channels are removed)
        if node.call_target in ("view", "reshape") or node.call_target is torch.reshape:
            shape = node.call_args[1:]
            shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
            return len(shape) == 2 and shape[1] == -1
        return False

    def keep_channels(self, node: Node, kept: np.ndarray) -> None:
        layer = copy.deepcopy(node.call_target)
        channels = node.output_shape[1]
        tensors = dict(layer.named_parameters(recurse=False)) | dict(layer.named_buffers(recurse=False))
        with torch.no_grad():
            for name, value in node.weights.items():  # (the node's weights: an edit may have changed them)
                tensor = tensors.get(name)
                if tensor is None or np.ndim(value) < 1 or np.shape(value)[0] != channels:
                    continue
                sliced = torch.as_tensor(np.ascontiguousarray(np.asarray(value)[kept]), dtype=tensor.dtype)
                setattr(layer, name, nn.Parameter(sliced, tensor.requires_grad)
                        if isinstance(tensor, nn.Parameter) else sliced)
        for count in ("num_features", "num_parameters"):  # batch norms', PReLU's channel count
            if getattr(layer, count, 1) == channels:
                setattr(layer, count, len(kept))
        node.call_target = layer
        node.weights = module_weights(layer)
        node.framework_attr = module_framework_attr(layer)

    def set_activation_bounds(self, node: Node, lower: float, upper: float) -> None:
        if node.kind == NodeKind.MODULE:
            m = nn.Hardtanh(float(lower), float(upper))
            node.call_target, node.type, node.weights = m, nn.Hardtanh, {}
            node.framework_attr = module_framework_attr(m)
        else:
            node.kind, node.type, node.call_target = NodeKind.FUNCTION, F.hardtanh, F.hardtanh
            node.call_args = (InputRef(0),)
            node.call_kwargs = {"min_val": float(lower), "max_val": float(upper)}
            node.framework_attr = dict(node.call_kwargs)

    # ---- graph patterns --------------------------------------------------------------------------
    def is_add(self, node: Node) -> bool:
        if node.kind not in (NodeKind.FUNCTION, NodeKind.METHOD) or len(node.inputs) != 2 \
                or not _member(node.type, _ADDS):
            return False
        refs = node.call_args
        extra = {k: v for k, v in node.call_kwargs.items() if not (k == "alpha" and v == 1)}
        return (len(refs) == 2 and not extra and all(isinstance(r, InputRef) for r in refs)
                and {r.index for r in refs} == {0, 1})

    def commutes_with_shift(self, node: Node) -> bool:
        if node.kind == NodeKind.MODULE:
            m = node.call_target
            if isinstance(m, _AVG_POOLS):
                return not any(_tuple(m.padding, 1)) or not m.count_include_pad
            return isinstance(m, _SHIFT_COMMUTING_MODULES)
        return node.kind in (NodeKind.FUNCTION, NodeKind.METHOD) and _member(node.type, _SHIFT_COMMUTING_CALLS)

    def commutes_with_channel_scale(self, node: Node) -> bool:
        if node.kind == NodeKind.MODULE:
            return isinstance(node.call_target, _CHANNEL_SCALE_COMMUTING_MODULES)
        if node.kind == NodeKind.FUNCTION:
            if node.type is F.pad:
                args = _bound_arguments(node)
                return args is not None and args.get("mode", "constant") == "constant" and not args.get("value")
            return _member(node.type, _CHANNEL_SCALE_COMMUTING_CALLS)
        return False

    # ---- new nodes -------------------------------------------------------------------------------
    def add_constant_node(self, name: str, input_name: str, value: float, output_shape: Any) -> Node:
        return Node(name, NodeKind.FUNCTION, operator.add, [input_name], {}, {}, operator.add,
                    (InputRef(0), float(value)), {}, output_shape)

    def pad_node(self, name: str, input_name: str, padding: Sequence[Tuple[int, int]], value: float,
                 output_shape: Any) -> Node:
        pad = tuple(int(v) for lo, hi in reversed(list(padding)) for v in (lo, hi))  # F.pad starts from the last dim
        kwargs = {"pad": pad, "mode": "constant", "value": float(value)}
        return Node(name, NodeKind.FUNCTION, F.pad, [input_name], dict(kwargs), {}, F.pad, (InputRef(0),), kwargs,
                    output_shape)
