"""TFLite 1.0: uniform 8-bit activations, symmetric per-channel 8-bit convolution kernels,
per-tensor fully-connected kernels, fixed output quantization of softmax-like ops, and
quantization-preserving data-movement ops.

Three departures from MCT's TFLite TPC, to follow TFLite's int8 specification: every activation is
uniform (MCT's gives ops without a kernel power-of-two thresholds, which TFLite does not have),
and a kernel op fuses the ReLU / ReLU6 / ELU after it (TFLite kernels carry a fused activation, so a
kernel's output is never quantized before its ReLU6 there; a PyTorch conv holds its bias, so MCT's
Conv + AddBias + ReLU pattern never matches there), and depthwise and transposed convolutions
(Keras' DepthwiseConv2D, Conv2DTranspose; PyTorch's are Conv) get the convolution's per-channel
kernels, as TFLite's DEPTHWISE_CONV_2D / TRANSPOSE_CONV take them; MCT's TPC leaves them float."""
from __future__ import annotations

from hwquant.constants import BIAS_ATTR, FLOAT_BITWIDTH, KERNEL_ATTR, TFLITE_TPC
from hwquant.tpc.enums import OperatorSetNames as N
from hwquant.tpc.enums import QuantizationMethod as M
from hwquant.tpc.platforms._blocks import attr, fusing, op, options, sets
from hwquant.tpc.schema import TargetPlatformCapabilities

VERSIONS = ("1.0",)


def get_tpc(version: str = "1.0") -> TargetPlatformCapabilities:
    if version not in VERSIONS:
        raise ValueError(f"TFLite TPC version '{version}' does not exist; available: {', '.join(VERSIONS)}")
    default_weight = attr(M.SYMMETRIC, 8, per_channel=False, enabled=False)
    default = op(default_weight, activation=M.UNIFORM)
    linear = op(default_weight, activation=M.UNIFORM, simd=None, attrs={
        KERNEL_ATTR: attr(M.SYMMETRIC, 8, per_channel=True, enabled=True),
        BIAS_ATTR: attr(M.SYMMETRIC, FLOAT_BITWIDTH, per_channel=False, enabled=False)})
    preserving = options([default.clone_and_edit(quantization_preserving=True)])

    def fixed(scale: float, zero_point: int):
        return options([default.clone_and_edit(fixed_scale=scale, fixed_zero_point=zero_point)])

    operator_set = (
        sets([n.value for n in (N.UNSTACK, N.TRANSPOSE, N.GATHER, N.RESHAPE, N.MAXPOOL, N.AVGPOOL, N.STRIDED_SLICE,
                                N.CONCATENATE, N.MUL, N.MIN, N.MAX, N.ZERO_PADDING2D, N.RESIZE, N.PAD, N.FOLD)],
             preserving)
        + sets([N.L2NORM.value], fixed(1 / 128, 0))
        + sets([N.LOG_SOFTMAX.value], fixed(16 / 256, 127))
        + sets([N.SOFTMAX.value], fixed(1 / 256, -128))
        + sets([N.FULLY_CONNECTED.value], options([linear.clone_and_edit(
            attr_to_edit={KERNEL_ATTR: {"weights_per_channel_threshold": False}})]))
        + sets([N.CONV.value, N.DEPTHWISE_CONV.value, N.CONV_TRANSPOSE.value], options([linear]))
        + sets([N.RELU.value, N.RELU6.value], None)
        + sets([N.TANH.value], fixed(1 / 256, -128))
        + sets([N.SIGMOID.value], options([default]))
        + sets([n.value for n in (N.BATCH_NORM, N.ADD, N.ADD_BIAS, N.ELU)], None)
        + sets([N.SQUEEZE.value], preserving))
    by_name = {s.name: s for s in operator_set}
    convs = [N.CONV.value, N.DEPTHWISE_CONV.value, N.CONV_TRANSPOSE.value]
    kernel, act = convs + [N.FULLY_CONNECTED.value], [N.RELU.value, N.RELU6.value, N.ELU.value]
    patterns = (
        fusing(kernel, act, by_name=by_name),
        fusing(kernel, [N.ADD_BIAS.value], by_name=by_name),
        fusing(kernel, [N.ADD_BIAS.value], act, by_name=by_name),
        fusing(convs, [N.BATCH_NORM.value], act, by_name=by_name),
        fusing(convs, [N.SQUEEZE.value], act, by_name=by_name),
        fusing([N.BATCH_NORM.value], act, by_name=by_name),
        fusing([N.BATCH_NORM.value], [N.ADD.value], act, by_name=by_name),
    )
    return TargetPlatformCapabilities(
        default_qco=options([default]), operator_set=tuple(operator_set), fusing_patterns=patterns,
        tpc_minor_version=1, tpc_patch_version=0, tpc_platform_type=TFLITE_TPC, add_metadata=False,
        name="tflite_tpc")
