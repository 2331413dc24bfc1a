"""Sony IMX500 target platforms, versions 1.0, 4.0, 5.0 and 6.0, and the two extra versions of the
edge-mdt-tpc package: 1.0_lut and 4.1.

All versions: power-of-two 8-bit activations, symmetric per-channel 8-bit kernels with 4- and 2-bit
mixed-precision candidates (wider SIMD at fewer bits), SIMD padding, convolution + activation fusing.
From 4.0: 16-bit activation candidates, quantization-preserving reshaping ops and quantized
constant inputs of binary ops. 5.0: 8-bit-only sigmoid, positional constants of Add/Sub/Mul, and
Exp/Sin/Cos. 6.0: Take and IndexSelect. 1.0_lut: 1.0 with non-uniform (lookup-table, symmetric)
4- and 2-bit kernel candidates. 4.1: 4.0 with an 8-bit-only sigmoid output, as 5.0.
"""
from __future__ import annotations

from hwquant.constants import BIAS_ATTR, FLOAT_BITWIDTH, IMX500_TPC, KERNEL_ATTR, POSITIONAL_ATTR
from hwquant.tpc.enums import OperatorSetNames as N
from hwquant.tpc.enums import QuantizationMethod as M
from hwquant.tpc.enums import Signedness
from hwquant.tpc.platforms._blocks import attr, fusing, op, options, sets
from hwquant.tpc.schema import QuantizationConfigOptions, TargetPlatformCapabilities

VERSIONS = ("1.0", "1.0_lut", "4.0", "4.1", "5.0", "6.0")

_DEFAULT_WEIGHT = attr(M.POWER_OF_TWO, 8, per_channel=False, enabled=False)
_KERNEL = attr(M.SYMMETRIC, 8, per_channel=True, enabled=True)
_BIAS = attr(M.POWER_OF_TWO, FLOAT_BITWIDTH, per_channel=False, enabled=False)

_NO_QUANT_V1 = [N.UNSTACK, N.DROPOUT, N.FLATTEN, N.SPLIT_CHUNK, N.GET_ITEM, N.RESHAPE, N.UNSQUEEZE, N.SIZE,
                N.PERMUTE, N.TRANSPOSE, N.EQUAL, N.ARGMAX, N.GATHER, N.TOPK, N.SQUEEZE, N.MAXPOOL, N.PAD,
                N.ZERO_PADDING2D, N.CAST, N.COMBINED_NON_MAX_SUPPRESSION, N.FAKE_QUANT, N.SSD_POST_PROCESS]
_KERNEL_OPS = [N.CONV, N.CONV_TRANSPOSE, N.DEPTHWISE_CONV, N.FULLY_CONNECTED]
_ACTIVATIONS_V1 = [N.RELU, N.RELU6, N.LEAKY_RELU, N.ADD, N.SUB, N.MUL, N.DIV, N.PRELU, N.SWISH, N.HARDSWISH,
                   N.SIGMOID, N.TANH, N.HARD_TANH]


def _names(xs) -> list:
    return [x.value for x in xs]


def get_tpc(version: str = "1.0") -> TargetPlatformCapabilities:
    """The IMX500 TPC of `version` (one of VERSIONS)."""
    if version not in VERSIONS:
        raise ValueError(f"IMX500 TPC version '{version}' does not exist; available: {', '.join(VERSIONS)}")
    number, _, extension = version.partition("_")
    major, minor = (int(x) for x in number.split("."))
    default = op(_DEFAULT_WEIGHT)
    linear = op(_DEFAULT_WEIGHT, attrs={KERNEL_ATTR: _KERNEL, BIAS_ATTR: _BIAS})

    # Fewer kernel bits run on a wider SIMD unit; the LUT variant's low-bit kernels are non-uniform.
    def kernel(bits: int) -> dict:
        lut = extension == "lut" and bits < 8
        return {"weights_n_bits": bits, **({"weights_quantization_method": M.LUT_SYM_QUANTIZER} if lut else {})}
    mixed = [linear.clone_and_edit(attr_to_edit={KERNEL_ATTR: kernel(b)}, simd_size=32 * 8 // b) for b in (8, 4, 2)]
    if major >= 4:
        mixed += [c.clone_and_edit(activation_n_bits=16, signedness=Signedness.SIGNED) for c in mixed]
    mixed_qco = options(mixed, base=mixed[0])
    default_qco = options([default])
    no_quant = options([default.clone_and_edit(enable_activation_quantization=False)])

    if major == 1:
        # edge-mdt-tpc's 1.0_lut also leaves an unfolded batch norm unquantized
        no_quant_names = _NO_QUANT_V1 + ([N.BATCH_NORM] if extension == "lut" else [])
        operator_set = (sets([N.STACK.value], default_qco) + sets(_names(no_quant_names), no_quant)
                        + sets(_names(_KERNEL_OPS), mixed_qco) + sets(_names(_ACTIVATIONS_V1), None))
        act_after_conv = [N.RELU, N.RELU6, N.LEAKY_RELU, N.HARD_TANH, N.SWISH, N.HARDSWISH, N.PRELU, N.SIGMOID, N.TANH]
        act_after_fc = [N.RELU, N.RELU6, N.LEAKY_RELU, N.HARD_TANH, N.SWISH, N.HARDSWISH, N.SIGMOID]
    else:
        operator_set = _operator_sets_v4_plus(major, minor, default, no_quant, mixed_qco)
        act_after_conv = [N.RELU, N.RELU6, N.LEAKY_RELU, N.HARD_TANH, N.SWISH, N.GELU, N.HARDSWISH, N.HARDSIGMOID,
                          N.PRELU, N.SIGMOID, N.TANH]
        act_after_fc = [N.RELU, N.RELU6, N.LEAKY_RELU, N.HARD_TANH, N.SWISH, N.SIGMOID, N.TANH, N.GELU, N.HARDSWISH,
                        N.HARDSIGMOID]

    by_name = {s.name: s for s in operator_set}
    any_relu = _names([N.RELU, N.RELU6, N.LEAKY_RELU, N.HARD_TANH])
    patterns = (
        fusing(_names([N.CONV, N.CONV_TRANSPOSE, N.DEPTHWISE_CONV]), _names(act_after_conv), by_name=by_name),
        fusing([N.FULLY_CONNECTED.value], _names(act_after_fc), by_name=by_name),
        fusing(_names([N.ADD, N.SUB, N.MUL, N.DIV]), any_relu, by_name=by_name),
    )
    return TargetPlatformCapabilities(
        default_qco=default_qco, operator_set=tuple(operator_set), fusing_patterns=patterns,
        tpc_minor_version=major, tpc_patch_version=minor, tpc_platform_type=IMX500_TPC,
        add_metadata=major >= 4 or extension == "lut", name="imx500_lut_tpc" if extension == "lut" else "imx500_tpc",
        is_simd_padding=True)


def _operator_sets_v4_plus(major, minor, default, no_quant, mixed_qco) -> list:
    io16 = (8, 16)
    no_quant_cfg = no_quant.base_config
    preserving = options([no_quant_cfg.clone_and_edit(quantization_preserving=True)])
    # Reshaping ops pass 8- or 16-bit tensors through unchanged.
    dim_ops = options([no_quant_cfg.clone_and_edit(quantization_preserving=True, supported_input_activation_n_bits=io16)])
    # Gather/Expand: preserving, with their constant input quantized to 16 bits.
    const16_preserving = options([no_quant_cfg.clone_and_edit(
        quantization_preserving=True, supported_input_activation_n_bits=io16 if major >= 5 else (8,),
        default_weight_attr_config=attr(M.POWER_OF_TWO, 16, per_channel=False, enabled=True))])
    act8 = default.clone_and_edit(supported_input_activation_n_bits=io16)
    act16 = act8.clone_and_edit(activation_n_bits=16, signedness=Signedness.SIGNED)
    act_8_or_16 = options([act8, act16], base=act8)
    act_8_only = options([act8])

    def with_constants(per_channel: bool, positional: bool) -> QuantizationConfigOptions:
        const = attr(M.POWER_OF_TWO, 8, per_channel=per_channel, enabled=True)
        c16, c8 = act16.clone_and_edit(default_weight_attr_config=const), act8.clone_and_edit(default_weight_attr_config=const)
        configs = [c16, c8]
        if positional:
            pos = {POSITIONAL_ATTR: attr(M.POWER_OF_TWO, 16, per_channel=False, enabled=True)}
            configs += [c.clone_and_edit(attr_weights_configs_mapping=pos) for c in (c16, c8)]
        return options(configs, base=c8)

    binary = with_constants(per_channel=True, positional=major >= 5)
    div = options([default.clone_and_edit(default_weight_attr_config=attr(M.POWER_OF_TWO, 8, per_channel=True, enabled=True))])
    nms = options([no_quant_cfg.clone_and_edit(supported_input_activation_n_bits=io16)])

    no_quant_names = [N.SIZE, N.EQUAL, N.ARGMAX, N.TOPK, N.FAKE_QUANT, N.SSD_POST_PROCESS]
    if major == 4:
        no_quant_names.insert(4, N.COMBINED_NON_MAX_SUPPRESSION)
    dim_names = [N.SPLIT_CHUNK, N.GET_ITEM, N.UNSTACK, N.STRIDED_SLICE, N.FLATTEN, N.RESHAPE, N.UNSQUEEZE, N.SQUEEZE,
                 N.PERMUTE, N.TRANSPOSE] + ([N.TAKE, N.INDEX_SELECT] if major >= 6 else [])
    result = sets(_names(no_quant_names), no_quant)
    if major >= 5:
        result += sets([N.COMBINED_NON_MAX_SUPPRESSION.value], nms)
    result += (sets(_names([N.DROPOUT, N.MAXPOOL, N.PAD, N.ZERO_PADDING2D, N.CAST]), preserving)
               + sets(_names(dim_names), dim_ops)
               + sets(_names([N.GATHER, N.EXPAND]), const16_preserving)
               + sets(_names([N.STACK, N.CONCATENATE]), with_constants(per_channel=False, positional=False))
               + sets(_names([N.BATCH_NORM, N.MIN, N.MAX]), act_8_or_16)
               + sets(_names(_KERNEL_OPS), mixed_qco)
               + sets(_names([N.RELU, N.RELU6, N.LEAKY_RELU]), act_8_or_16)
               + sets(_names([N.ADD, N.SUB, N.MUL]), binary)
               + sets([N.DIV.value], div)
               + sets(_names([N.PRELU, N.SWISH, N.HARDSWISH]), act_8_or_16)
               + sets([N.SIGMOID.value], act_8_only if (major, minor) >= (4, 1) else act_8_or_16)
               + sets(_names([N.TANH, N.GELU, N.HARDSIGMOID, N.HARD_TANH]), act_8_or_16))
    if major >= 5:
        result += sets(_names([N.EXP, N.SIN, N.COS]), act_8_or_16)
    return result
