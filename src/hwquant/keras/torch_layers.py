"""A quantized model's convolutions and a trainable model's max pooling on Keras' torch backend, without Keras' layout copies.

Keras' torch convolution copies its NHWC input into NCHW (``permute(...).contiguous()``) and then back into
channels-last memory (``contiguous(memory_format=channels_last)``), which is the memory the NHWC input
already had; its max pooling copies into NCHW and pools there (torch's NCHW max pooling on the CPU is
several times slower than its channels-last one); the backward passes copy the gradients back the same
way. In a QAT step those copies and that pooling cost about as much as the convolutions. Here the NHWC
tensor is handed to torch as its channels-last NCHW view: the same convolution / pooling of the same
memory (bitwise Keras' outputs and gradients, ties in a pooling window included), an NHWC output and an
input gradient that need no copy either. Everything else is the layer's own (bias added in NHWC, activation).

- :func:`handles` / :func:`call`: a quantization wrapper's Conv2D / DepthwiseConv2D (keras/quantizers.py), in
  training and in inference;
- :func:`speed_up`: the plain Conv2D, DepthwiseConv2D and MaxPooling2D layers of every model hwquant builds
  (keras/builder.py).
"""
from __future__ import annotations

import types
from typing import Any, List, Tuple

import keras
import torch
import torch.nn.functional as F


def handles(layer: Any, inputs: Any) -> bool:
    """Whether :func:`call` computes ``layer(inputs)``: a plain Keras Conv2D / DepthwiseConv2D in channels-last
    on a real (not symbolic) 4-D float tensor of the layer's compute dtype, without LoRA or Keras' own quantization."""
    return (type(layer) in (keras.layers.Conv2D, keras.layers.DepthwiseConv2D) and layer.data_format == "channels_last"
            and isinstance(inputs, torch.Tensor) and inputs.dim() == 4 and inputs.device.type != "meta"
            and not getattr(layer, "lora_enabled", False) and getattr(layer, "quantization_mode", None) is None
            and keras.backend.standardize_dtype(inputs.dtype) == layer.compute_dtype)


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> Tuple[int, int]:
    """(before, after) of 'same' padding along one dimension, as Keras computes it (the extra pixel after)."""
    effective = (kernel - 1) * dilation + 1
    total = effective - 1 if stride == 1 else max(0, (-(-size // stride) - 1) * stride + effective - size)
    return total // 2, total - total // 2


def _conv(layer: Any, inputs: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Keras' ``ops.conv`` / ``ops.depthwise_conv`` of ``inputs`` (NHWC) and ``kernel`` (Keras' layout), NHWC out."""
    if isinstance(layer, keras.layers.DepthwiseConv2D):  # (kh, kw, C, m) -> (kh, kw, 1, C * m), as Keras reshapes it
        kernel = kernel.reshape(tuple(kernel.shape[:-2]) + (1, kernel.shape[-2] * kernel.shape[-1]))
    weight = kernel.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)  # (out, in / groups, kh, kw)
    x = inputs.permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels-last, no copy
    groups = x.shape[1] // weight.shape[1]
    strides, dilation = tuple(layer.strides), tuple(layer.dilation_rate)
    padding: Any = 0
    if layer.padding == "same":
        pads = [_same_padding(x.shape[2 + i], weight.shape[2 + i], strides[i], dilation[i]) for i in range(2)]
        if all(before == after for before, after in pads):
            padding = [before for before, _ in pads]
        else:
            flat: List[int] = [p for pad in reversed(pads) for p in pad]
            x = F.pad(x, tuple(flat), mode="constant")
    return F.conv2d(x, weight, stride=strides, padding=padding, dilation=dilation, groups=groups).permute(0, 2, 3, 1)


def call(layer: Any, inputs: torch.Tensor) -> torch.Tensor:
    """``layer(inputs)`` for a layer :func:`handles`, reading its weights as its own ``call`` does (inside a
    ``keras.StatelessScope`` they are the scope's values)."""
    outputs = _conv(layer, inputs, keras.ops.convert_to_tensor(layer.kernel))
    if layer.use_bias:
        outputs = keras.ops.add(outputs, keras.ops.reshape(layer.bias, (1, 1, 1, -1)))
    return layer.activation(outputs) if layer.activation is not None else outputs


def _pools_channels_last(layer: Any, inputs: Any) -> bool:
    return (isinstance(inputs, torch.Tensor) and inputs.dim() == 4 and inputs.device.type != "meta"
            and layer.data_format == "channels_last" and layer.padding == "valid")


def _max_pooling_call(self: Any, inputs: Any) -> Any:
    """MaxPooling2D.call: Keras' ``ops.max_pool`` on the channels-last view where it applies ('valid' padding
    on a real NHWC tensor), Keras' own call otherwise."""
    if not _pools_channels_last(self, inputs):
        return type(self).call(self, inputs)
    return F.max_pool2d(inputs.permute(0, 3, 1, 2), kernel_size=tuple(self.pool_size), stride=tuple(self.strides),
                        padding=0).permute(0, 2, 3, 1)


def _convolution_call(self: Any, inputs: Any) -> Any:
    """Conv2D / DepthwiseConv2D.call: :func:`call` where it :func:`handles` the input, Keras' own call otherwise."""
    return call(self, inputs) if handles(self, inputs) else type(self).call(self, inputs)


def speed_up(model: Any) -> None:
    """Give each plain Keras Conv2D, DepthwiseConv2D and MaxPooling2D layer of a model hwquant built the
    channels-last computation (on the instance: its class, config and serialization stay Keras' own; a model
    saved and loaded again, or cloned, computes as Keras does, with the same values)."""
    for layer in model._flatten_layers(include_self=False):
        if type(layer) is keras.layers.MaxPooling2D:
            layer.call = types.MethodType(_max_pooling_call, layer)
        elif type(layer) in (keras.layers.Conv2D, keras.layers.DepthwiseConv2D):
            layer.call = types.MethodType(_convolution_call, layer)
