"""QNNPACK 1.0: uniform 8-bit activations and symmetric per-tensor 8-bit kernels for
convolutions and fully-connected layers; convolution + batch-norm + ReLU fusing."""
from __future__ import annotations

from hwquant.constants import BIAS_ATTR, FLOAT_BITWIDTH, KERNEL_ATTR, QNNPACK_TPC
from hwquant.tpc.enums import OperatorSetNames as N
from hwquant.tpc.enums import QuantizationMethod as M
from hwquant.tpc.platforms._blocks import attr, fusing, op, options, sets
from hwquant.tpc.schema import TargetPlatformCapabilities

VERSIONS = ("1.0",)


def get_tpc(version: str = "1.0") -> TargetPlatformCapabilities:
    if version not in VERSIONS:
        raise ValueError(f"QNNPACK TPC version '{version}' does not exist; available: {', '.join(VERSIONS)}")
    default_weight = attr(M.SYMMETRIC, 8, per_channel=False, enabled=False)
    default = op(default_weight, activation=M.UNIFORM, simd=None)
    linear = options([op(default_weight, activation=M.UNIFORM, simd=None, attrs={
        KERNEL_ATTR: attr(M.SYMMETRIC, 8, per_channel=False, enabled=True),
        BIAS_ATTR: attr(M.SYMMETRIC, FLOAT_BITWIDTH, per_channel=False, enabled=False)})])
    operator_set = (sets([n.value for n in (N.CONV, N.DEPTHWISE_CONV, N.CONV_TRANSPOSE)], linear)
                    + sets([N.BATCH_NORM.value, N.RELU.value, N.RELU6.value, N.HARD_TANH.value], None)
                    + sets([N.FULLY_CONNECTED.value], linear))
    by_name = {s.name: s for s in operator_set}
    conv, relu = [N.CONV.value, N.CONV_TRANSPOSE.value], [N.RELU.value, N.RELU6.value, N.HARD_TANH.value]
    patterns = (fusing(conv, [N.BATCH_NORM.value], relu, by_name=by_name),
                fusing(conv, [N.BATCH_NORM.value], by_name=by_name),
                fusing(conv, relu, by_name=by_name),
                fusing([N.FULLY_CONNECTED.value], relu, by_name=by_name))
    return TargetPlatformCapabilities(
        default_qco=options([default]), operator_set=tuple(operator_set), fusing_patterns=patterns,
        tpc_minor_version=1, tpc_patch_version=0, tpc_platform_type=QNNPACK_TPC, add_metadata=False,
        name="qnnpack_tpc")
