"""Which PyTorch layers, functions and tensor methods belong to each TPC operator set, and the
PyTorch names of the TPC's weight attributes. `attach_tpc` joins a TPC with this table (and the
user's `custom_tpc_opset_to_layer`) into a FrameworkQuantizationCapabilities."""
from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from hwquant.constants import BIAS_ATTR, KERNEL_ATTR
from hwquant.tpc.attachment import FrameworkQuantizationCapabilities, attach_with_table
from hwquant.tpc.enums import OperatorSetNames as N
from hwquant.tpc.layer_filters import Eq, LayerFilterParams
from hwquant.tpc.schema import TargetPlatformCapabilities
from hwquant.torch.deployment.custom_layers import EdgeMdtNMSFilter

T = torch.Tensor

OPSET_TO_LAYERS: Dict[str, List[Any]] = {
    N.CONV: [nn.Conv1d, nn.Conv2d, nn.Conv3d],
    N.DEPTHWISE_CONV: [],  # depthwise convolutions are nn.Conv2d with groups: attached to Conv
    N.CONV_TRANSPOSE: [nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d],
    N.FULLY_CONNECTED: [nn.Linear],
    N.CONCATENATE: [torch.cat, torch.concat, torch.concatenate],
    N.STACK: [torch.stack],
    N.UNSTACK: [torch.unbind, T.unbind],
    N.GATHER: [torch.gather, T.gather],
    N.EXPAND: [T.expand, T.expand_as, T.repeat],
    N.BATCH_NORM: [nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, F.batch_norm],
    N.L2NORM: [LayerFilterParams(F.normalize, Eq("p", 2) | Eq("p", None))],
    N.RELU: [torch.relu, nn.ReLU, F.relu, T.relu],
    N.RELU6: [nn.ReLU6, F.relu6],
    N.LEAKY_RELU: [nn.LeakyReLU, F.leaky_relu],
    N.ELU: [nn.ELU, F.elu],
    N.HARD_TANH: [LayerFilterParams(nn.Hardtanh, min_val=0), LayerFilterParams(F.hardtanh, min_val=0)],
    N.ADD: [operator.add, torch.add, T.add],
    N.SUB: [operator.sub, torch.sub, torch.subtract, T.sub],
    N.MUL: [operator.mul, torch.mul, torch.multiply, T.mul],
    N.DIV: [operator.truediv, torch.div, torch.divide, T.div],
    N.MIN: [torch.minimum],
    N.MAX: [torch.maximum],
    N.PRELU: [nn.PReLU, F.prelu],
    N.ADD_BIAS: [],
    N.SWISH: [nn.SiLU, F.silu],
    N.SIGMOID: [nn.Sigmoid, torch.sigmoid, F.sigmoid, T.sigmoid],
    N.SOFTMAX: [nn.Softmax, torch.softmax, F.softmax, T.softmax],
    N.LOG_SOFTMAX: [nn.LogSoftmax, F.log_softmax],
    N.TANH: [nn.Tanh, torch.tanh, F.tanh, T.tanh],
    N.GELU: [nn.GELU, F.gelu],
    N.HARDSIGMOID: [nn.Hardsigmoid, F.hardsigmoid],
    N.HARDSWISH: [nn.Hardswish, F.hardswish],
    N.FLATTEN: [nn.Flatten, torch.flatten, T.flatten],
    N.GET_ITEM: [operator.getitem],
    N.RESHAPE: [torch.reshape, T.reshape, T.view, T.view_as],
    N.UNSQUEEZE: [torch.unsqueeze, T.unsqueeze],
    N.SQUEEZE: [torch.squeeze, T.squeeze],
    N.PERMUTE: [torch.permute, T.permute],
    N.TRANSPOSE: [torch.transpose, T.transpose],
    N.DROPOUT: [nn.Dropout, F.dropout, torch.dropout],
    N.SPLIT_CHUNK: [torch.split, torch.chunk, T.split, T.chunk],
    N.MAXPOOL: [nn.MaxPool1d, nn.MaxPool2d, F.max_pool2d],
    N.AVGPOOL: [nn.AvgPool2d, F.avg_pool2d],
    N.SIZE: [T.size],
    N.RESIZE: [T.resize_],
    N.PAD: [F.pad],
    N.FOLD: [F.fold],
    N.SHAPE: [],
    N.EQUAL: [torch.equal, torch.eq, operator.eq],
    N.ARGMAX: [torch.argmax, T.argmax],
    N.TOPK: [torch.topk, T.topk],
    N.FAKE_QUANT: [torch.fake_quantize_per_channel_affine, torch.fake_quantize_per_tensor_affine],
    N.ZERO_PADDING2D: [nn.ZeroPad2d],
    N.CAST: [T.type, T.to, T.float],
    N.STRIDED_SLICE: [],
    N.SSD_POST_PROCESS: [],
    N.COMBINED_NON_MAX_SUPPRESSION: [EdgeMdtNMSFilter()],  # Sony's edge-mdt-cl NMS layers
    N.EXP: [torch.exp, T.exp],
    N.SIN: [torch.sin, T.sin],
    N.COS: [torch.cos, T.cos],
    N.TAKE: [torch.take],
    N.INDEX_SELECT: [torch.index_select, T.index_select],
}
OPSET_TO_LAYERS = {k.value: v for k, v in OPSET_TO_LAYERS.items()}

_KERNEL_ATTRS = {KERNEL_ATTR: "weight", BIAS_ATTR: "bias"}
OPSET_ATTR_MAPPING: Dict[str, Dict[str, str]] = {
    N.CONV.value: _KERNEL_ATTRS, N.CONV_TRANSPOSE.value: _KERNEL_ATTRS, N.FULLY_CONNECTED.value: _KERNEL_ATTRS,
    N.DEPTHWISE_CONV.value: _KERNEL_ATTRS,
}


def attach_tpc(tpc: TargetPlatformCapabilities,
               custom_opset_to_layer: Optional[Dict[str, Any]] = None) -> FrameworkQuantizationCapabilities:
    """The TPC attached to PyTorch's layers (see `attach_with_table`)."""
    return attach_with_table(tpc, OPSET_TO_LAYERS, OPSET_ATTR_MAPPING, "pytorch", custom_opset_to_layer)
