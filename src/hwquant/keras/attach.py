"""Which Keras 3 layers and raw operations (keras.ops calls captured in a functional model) belong to
each TPC operator set, and the Keras names of the TPC's weight attributes (every kernel is 'kernel' in Keras 3)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from keras import layers as L
from keras.src.ops import core as C
from keras.src.ops import nn as NN
from keras.src.ops import numpy as NP

from hwquant.constants import BIAS_ATTR, KERNEL_ATTR
from hwquant.tpc.attachment import FrameworkQuantizationCapabilities, attach_with_table
from hwquant.tpc.enums import OperatorSetNames as N
from hwquant.tpc.layer_filters import LayerFilterParams
from hwquant.tpc.schema import TargetPlatformCapabilities


def _activation(*names: str) -> List[LayerFilterParams]:
    """`keras.layers.Activation(name)` layers (a fused activation is captured as one of these)."""
    return [LayerFilterParams(L.Activation, activation=n) for n in names]


OPSET_TO_LAYERS: Dict[str, List[Any]] = {
    N.CONV: [L.Conv1D, L.Conv2D, L.Conv3D],
    N.DEPTHWISE_CONV: [L.DepthwiseConv1D, L.DepthwiseConv2D],
    N.CONV_TRANSPOSE: [L.Conv1DTranspose, L.Conv2DTranspose, L.Conv3DTranspose],
    N.FULLY_CONNECTED: [L.Dense, L.EinsumDense],  # (an EinsumDense is a dense product over named axes)
    N.CONCATENATE: [L.Concatenate, NP.Concatenate],
    N.STACK: [NP.Stack],
    N.UNSTACK: [C.Unstack],
    N.GATHER: [],
    N.EXPAND: [],
    N.BATCH_NORM: [L.BatchNormalization],
    N.L2NORM: [],
    N.RELU: [LayerFilterParams(L.ReLU, max_value=None, negative_slope=0.0, threshold=0.0), NN.Relu,
             *_activation("relu")],
    N.RELU6: [LayerFilterParams(L.ReLU, max_value=6.0, negative_slope=0.0, threshold=0.0), NN.Relu6,
              *_activation("relu6")],
    N.LEAKY_RELU: [L.LeakyReLU, NN.LeakyRelu, *_activation("leaky_relu")],
    N.ELU: [L.ELU, NN.Elu, *_activation("elu")],
    N.HARD_TANH: [],
    N.ADD: [L.Add, NP.Add],
    N.SUB: [L.Subtract, NP.Subtract],
    N.MUL: [L.Multiply, NP.Multiply],
    N.DIV: [NP.Divide, NP.TrueDivide],
    N.MIN: [L.Minimum, NP.Minimum],
    N.MAX: [L.Maximum, NP.Maximum],
    N.PRELU: [L.PReLU],
    N.ADD_BIAS: [],
    N.SWISH: [NN.Silu, *_activation("swish", "silu")],
    N.SIGMOID: [NN.Sigmoid, *_activation("sigmoid")],
    N.SOFTMAX: [L.Softmax, NN.Softmax, *_activation("softmax")],
    N.LOG_SOFTMAX: [NN.LogSoftmax, *_activation("log_softmax")],
    N.TANH: [NP.Tanh, *_activation("tanh")],
    N.GELU: [NN.Gelu, *_activation("gelu")],
    N.HARDSIGMOID: [NN.HardSigmoid, *_activation("hard_sigmoid")],
    N.HARDSWISH: [NN.HardSilu, *_activation("hard_silu", "hard_swish")],
    N.FLATTEN: [L.Flatten],
    N.GET_ITEM: [],
    N.RESHAPE: [L.Reshape, NP.Reshape],
    N.UNSQUEEZE: [NP.ExpandDims],
    N.SQUEEZE: [NP.Squeeze],
    N.PERMUTE: [L.Permute],
    N.TRANSPOSE: [NP.Transpose],
    N.DROPOUT: [L.Dropout],
    N.SPLIT_CHUNK: [],
    N.MAXPOOL: [L.MaxPooling1D, L.MaxPooling2D, L.MaxPooling3D],
    N.AVGPOOL: [L.AveragePooling1D, L.AveragePooling2D, L.AveragePooling3D],
    N.SIZE: [],
    N.RESIZE: [L.Resizing],
    N.PAD: [NP.Pad],
    N.FOLD: [],
    N.SHAPE: [],
    N.EQUAL: [NP.Equal],
    N.ARGMAX: [NP.Argmax],
    N.TOPK: [],
    N.FAKE_QUANT: [],
    N.ZERO_PADDING2D: [L.ZeroPadding2D],
    N.CAST: [C.Cast],
    N.STRIDED_SLICE: [C.Slice],
    N.SSD_POST_PROCESS: [],
    N.COMBINED_NON_MAX_SUPPRESSION: [],
    N.EXP: [NP.Exp],
    N.SIN: [NP.Sin],
    N.COS: [NP.Cos],
    N.TAKE: [NP.Take],
    N.INDEX_SELECT: [],
}
OPSET_TO_LAYERS = {k.value: v for k, v in OPSET_TO_LAYERS.items()}

_KERNEL_ATTRS = {KERNEL_ATTR: "kernel", BIAS_ATTR: "bias"}
OPSET_ATTR_MAPPING: Dict[str, Dict[str, str]] = {
    N.CONV.value: _KERNEL_ATTRS, N.CONV_TRANSPOSE.value: _KERNEL_ATTRS, N.FULLY_CONNECTED.value: _KERNEL_ATTRS,
    N.DEPTHWISE_CONV.value: _KERNEL_ATTRS,  # Keras 3 names a depthwise kernel 'kernel' too
}


def attach_tpc(tpc: TargetPlatformCapabilities,
               custom_opset_to_layer: Optional[Dict[str, Any]] = None) -> FrameworkQuantizationCapabilities:
    """The TPC attached to Keras's layers and operations (see `attach_with_table`)."""
    return attach_with_table(tpc, OPSET_TO_LAYERS, OPSET_ATTR_MAPPING, "keras", custom_opset_to_layer)
