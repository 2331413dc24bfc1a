"""The trainable Keras quantizers' training step on TensorFlow for symmetric / power-of-two STE quantizers:
TensorFlow's fused ``FakeQuantWithMinMaxVars`` (per tensor) and ``...PerChannel`` operations, the ones MCT's
Keras quantizers train with. Imported only when Keras runs on TensorFlow.

A fake quantization in ``keras.ops`` is half a dozen passes over the tensor forward and as many backward;
TensorFlow (without XLA, which is slower on CPU) runs each as its own kernel, so a QAT step of a small CNN
spent more time in its quantizers than in its convolutions. The fused operations take one pass each way.
Their semantics are MCT's, not quite ``quant_math``'s (which inference and the finalized model keep):
values round half up (``floor(x / s + 1/2)``) where quant_math rounds half to even; the grid is rebuilt from
[min, max] = [qmin s, qmax s] (exact for a power-of-two threshold, within a float32 rounding of s otherwise);
the input's gradient passes on [min, max] and the threshold's comes from the values outside it (STE).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import tensorflow as tf


def power_of_two_ceil(t: Any) -> Any:
    """2**ceil(log2 t) of a positive normal float32, exactly: the mantissa's bits rounded up into the exponent."""
    bits = tf.bitcast(t, tf.int32)
    return tf.bitcast(tf.bitwise.bitwise_and(bits + 0x7FFFFF, -0x800000), tf.float32)


def takes(x: Any, num_bits: int) -> bool:
    """Whether the fused operations can fake-quantize ``x`` at ``num_bits`` (float32, 2 to 16 bits)."""
    return 2 <= num_bits <= 16 and getattr(x, "dtype", None) in ("float32", tf.float32)


def symmetric_fake_quantize(x: Any, threshold: Any, min_threshold: float, power_of_two: bool, num_bits: int,
                            signed: bool, axis: Optional[int]) -> Any:
    """``x`` fake-quantized onto the symmetric grid of the learned ``threshold`` (a variable: at least
    ``min_threshold``, rounded up to a power of two straight through for power-of-two quantizers), per channel
    along ``axis`` when the threshold has more than one value; the gradients to x and, when it is trained, to
    the threshold."""
    x = tf.convert_to_tensor(x)
    steps = 2 ** (num_bits - 1 if signed else num_bits)
    # the grid's ends per unit of threshold: [qmin s, qmax s] with s = t / steps
    low_per_unit, high_per_unit = (-1.0 if signed else 0.0), (steps - 1) / steps
    per_channel = axis is not None and math.prod(threshold.shape) > 1
    rank = x.shape.rank
    axis = None if not per_channel else axis % rank
    perm = None if axis in (None, rank - 1) else [rank - 1 if d == axis else axis if d == rank - 1 else d
                                                  for d in range(rank)]

    def grid_threshold(t):
        t = tf.maximum(t, min_threshold)
        return power_of_two_ceil(t) if power_of_two else t

    def channels_last(t):  # (the per-channel operation takes its channels last: MCT transposes a depthwise kernel
        return t if perm is None else tf.transpose(t, perm)  # the same way; the swap is its own inverse)

    def fake_quantize(x_last, low, high):  # on x with its channels last
        if not per_channel:
            return tf.quantization.fake_quant_with_min_max_vars(x_last, low, high, num_bits=num_bits)
        return tf.quantization.fake_quant_with_min_max_vars_per_channel(x_last, low, high, num_bits=num_bits)

    shape = [-1] if per_channel else []
    if not getattr(threshold, "trainable", True):  # frozen: no gradient to compute, the ends from the variable
        t = grid_threshold(tf.reshape(tf.convert_to_tensor(threshold), shape))
        return channels_last(fake_quantize(channels_last(x), t * low_per_unit, t * high_per_unit))

    @tf.custom_gradient
    def learned(x, threshold):
        t = grid_threshold(threshold)
        low, high = t * low_per_unit, t * high_per_unit
        x_last = channels_last(x)  # (kept for the backward pass: transposed once)
        y = channels_last(fake_quantize(x_last, low, high))

        def gradients(g):
            # the input's gradient on [low, high]; the threshold's from the values outside (its ends move with it),
            # through the power-of-two rounding (straight through) and where it is above min_threshold
            gradient = (tf.raw_ops.FakeQuantWithMinMaxVarsGradient if not per_channel
                        else tf.raw_ops.FakeQuantWithMinMaxVarsPerChannelGradient)
            gx, g_low, g_high = gradient(gradients=channels_last(g), inputs=x_last, min=low, max=high,
                                         num_bits=num_bits)
            g_threshold = (g_low * low_per_unit + g_high * high_per_unit) * tf.cast(threshold >= min_threshold, g.dtype)
            return channels_last(gx), g_threshold
        return y, gradients

    return learned(x, tf.reshape(tf.convert_to_tensor(threshold), shape))
