"""The shipped platforms hold what the documented API says they hold."""
import pytest

from hwquant.constants import BIAS_ATTR, KERNEL_ATTR, POSITIONAL_ATTR
from hwquant.errors import InvalidTPCError
from hwquant.tpc import QuantizationMethod as M
from hwquant.tpc import Signedness, get_target_platform_capabilities


def kernel_bits(qco):
    return sorted({c.attr_weights_configs_mapping[KERNEL_ATTR].weights_n_bits for c in qco.quantization_configurations})


def fused_after(tpc, first):
    return [names for f in tpc.fusing_patterns for names in [f.member_names()] if first in names[0]]


@pytest.mark.parametrize("version", ["1.0", "4.0", "5.0", "6.0"])
def test_imx500_common_rules(version):
    tpc = get_target_platform_capabilities(version, "imx500")
    assert (tpc.tpc_platform_type, tpc.tpc_minor_version, tpc.is_simd_padding) == ("imx500", int(version[0]), True)
    default = tpc.get_default_op_quantization_config()
    assert default.activation_quantization_method is M.POWER_OF_TWO and default.activation_n_bits == 8
    assert default.simd_size == 32
    for name in ("Conv", "DepthwiseConv2D", "ConvTranspose", "FullyConnected"):
        qco = tpc.get_config_options_by_operators_set(name)
        kernel = qco.base_config.attr_weights_configs_mapping[KERNEL_ATTR]
        assert (kernel.weights_quantization_method, kernel.weights_n_bits, kernel.weights_per_channel_threshold) == \
            (M.SYMMETRIC, 8, True)
        assert not qco.base_config.attr_weights_configs_mapping[BIAS_ATTR].enable_weights_quantization
        assert kernel_bits(qco) == [2, 4, 8]
        simd = {c.attr_weights_configs_mapping[KERNEL_ATTR].weights_n_bits: c.simd_size for c in qco.quantization_configurations}
        assert simd == {8: 32, 4: 64, 2: 128}
    conv_acts = fused_after(tpc, "Conv")[0][1]
    assert {"ReLU", "ReLU6", "LeakyReLU", "HardTanh", "Swish", "HardSwish", "PReLU", "Sigmoid", "Tanh"} <= set(conv_acts)
    assert fused_after(tpc, "Add")[0][1] == ("ReLU", "ReLU6", "LeakyReLU", "HardTanh")
    assert fused_after(tpc, "FullyConnected")


def test_imx500_v1_has_no_16_bit_and_no_preserving_ops():
    tpc = get_target_platform_capabilities("1.0")
    for s in tpc.operator_set:
        for c in (s.qc_options or tpc.default_qco).quantization_configurations:
            assert c.activation_n_bits == 8 and not c.quantization_preserving
    assert not tpc.get_config_options_by_operators_set("Reshape").base_config.enable_activation_quantization


@pytest.mark.parametrize("version", ["4.0", "5.0", "6.0"])
def test_imx500_v4_plus_16_bit_options_and_preserving_ops(version):
    tpc = get_target_platform_capabilities(version)
    conv = tpc.get_config_options_by_operators_set("Conv").quantization_configurations
    assert sorted({(c.activation_n_bits, c.signedness) for c in conv}) == [(8, Signedness.AUTO), (16, Signedness.SIGNED)]
    relu = tpc.get_config_options_by_operators_set("ReLU")
    assert relu.base_config.activation_n_bits == 8 and {c.activation_n_bits for c in relu.quantization_configurations} == {8, 16}
    reshape = tpc.get_config_options_by_operators_set("Reshape").base_config
    assert reshape.quantization_preserving and reshape.supported_input_activation_n_bits == (8, 16)
    gather = tpc.get_config_options_by_operators_set("Gather").base_config
    assert gather.quantization_preserving and gather.default_weight_attr_config.weights_n_bits == 16
    add = tpc.get_config_options_by_operators_set("Add")
    assert add.base_config.activation_n_bits == 8 and add.base_config.default_weight_attr_config.enable_weights_quantization
    has_pos = any(POSITIONAL_ATTR in c.attr_weights_configs_mapping for c in add.quantization_configurations)
    assert has_pos == (version != "4.0")
    sigmoid_bits = {c.activation_n_bits for c in tpc.get_config_options_by_operators_set("Sigmoid").quantization_configurations}
    assert sigmoid_bits == ({8, 16} if version == "4.0" else {8})
    assert tpc.is_opset_in_model("Exp") == (version != "4.0")
    assert tpc.is_opset_in_model("IndexSelect") == (version == "6.0")


def test_tflite():
    tpc = get_target_platform_capabilities("1.0", "tflite")
    conv = tpc.get_config_options_by_operators_set("Conv").base_config
    fc = tpc.get_config_options_by_operators_set("FullyConnected").base_config
    assert conv.activation_quantization_method is M.UNIFORM
    assert conv.attr_weights_configs_mapping[KERNEL_ATTR].weights_per_channel_threshold
    assert not fc.attr_weights_configs_mapping[KERNEL_ATTR].weights_per_channel_threshold
    softmax = tpc.get_config_options_by_operators_set("Softmax").base_config
    assert (softmax.fixed_scale, softmax.fixed_zero_point) == (1 / 256, -128)
    assert tpc.get_config_options_by_operators_set("Reshape").base_config.quantization_preserving
    # TFLite's int8 spec: every activation uniform (MCT's TPC gives kernel-less ops power-of-two), and a
    # kernel op carries its ReLU / ReLU6 fused (no AddBias between them in a PyTorch conv); depthwise and
    # transposed convolutions (Keras layers of their own) take per-channel kernels as TFLite's int8 ops do
    assert tpc.get_default_op_quantization_config().activation_quantization_method is M.UNIFORM
    assert tpc.get_config_options_by_operators_set("Sigmoid").base_config.activation_quantization_method is M.UNIFORM
    assert "Conv_DepthwiseConv2D_ConvTranspose_FullyConnected_ReLU_ReLU6_Elu" in [p.name for p in tpc.fusing_patterns]
    for name in ("DepthwiseConv2D", "ConvTranspose"):
        assert tpc.get_config_options_by_operators_set(name).base_config == conv


def test_qnnpack():
    tpc = get_target_platform_capabilities("1.0", "qnnpack")
    for name in ("Conv", "FullyConnected"):
        base = tpc.get_config_options_by_operators_set(name).base_config
        kernel = base.attr_weights_configs_mapping[KERNEL_ATTR]
        assert (kernel.weights_quantization_method, kernel.weights_per_channel_threshold) == (M.SYMMETRIC, False)
        assert kernel.enable_weights_quantization and base.activation_quantization_method is M.UNIFORM
    assert tpc.get_default_op_quantization_config().activation_quantization_method is M.UNIFORM


def test_version_and_device_resolution():
    assert get_target_platform_capabilities() == get_target_platform_capabilities("1.0", "imx500")
    assert get_target_platform_capabilities(4.0).tpc_minor_version == 4
    assert get_target_platform_capabilities("5").tpc_minor_version == 5
    assert get_target_platform_capabilities("pytorch", "default") == get_target_platform_capabilities()
    assert get_target_platform_capabilities("pytorch", "imx500", "v1") == get_target_platform_capabilities()
    with pytest.raises(InvalidTPCError, match="available: imx500, tflite, qnnpack"):
        get_target_platform_capabilities("1.0", "gpu")
    with pytest.raises(InvalidTPCError, match="available: 1.0, 1.0_lut, 4.0, 4.1, 5.0, 6.0"):
        get_target_platform_capabilities("2.0")
    with pytest.raises(InvalidTPCError, match="v1_lut"):
        get_target_platform_capabilities("pytorch", "imx500", "v2")


def test_edge_mdt_tpc_versions():
    """edge-mdt-tpc's two extra IMX500 versions (compared field by field with the package's own TPCs,
    read into hwquant, when written): 1.0_lut and 4.1."""
    lut = get_target_platform_capabilities("1.0", "imx500", extended_version="lut")
    assert lut == get_target_platform_capabilities("1.0_lut") == get_target_platform_capabilities("pytorch", "imx500", "v1_lut")
    methods = {c.attr_weights_configs_mapping[KERNEL_ATTR].weights_n_bits:
               c.attr_weights_configs_mapping[KERNEL_ATTR].weights_quantization_method
               for c in lut.get_config_options_by_operators_set("Conv").quantization_configurations}
    assert methods == {8: M.SYMMETRIC, 4: M.LUT_SYM_QUANTIZER, 2: M.LUT_SYM_QUANTIZER}
    assert not lut.get_config_options_by_operators_set("BatchNorm").base_config.enable_activation_quantization
    v40, v41 = get_target_platform_capabilities("4.0"), get_target_platform_capabilities("4.1")
    assert (v41.tpc_minor_version, v41.tpc_patch_version) == (4, 1)
    assert {c.activation_n_bits for c in v41.get_config_options_by_operators_set("Sigmoid").quantization_configurations} == {8}
    others = lambda t: [s for s in t.operator_set if s.name != "Sigmoid"]
    assert others(v40) == others(v41)


def test_sdsp_converter_versions_pick_their_tpc():
    from hwquant import get_target_platform_capabilities_sdsp
    assert get_target_platform_capabilities_sdsp() == get_target_platform_capabilities("1.0")
    assert get_target_platform_capabilities_sdsp("3.16") == get_target_platform_capabilities("4.0")
    assert get_target_platform_capabilities_sdsp(3.17) == get_target_platform_capabilities("5.0")
    with pytest.raises(InvalidTPCError, match="SDSP.*'3.1'.*available: 3.14, 3.16"):
        get_target_platform_capabilities_sdsp("3.1")


def test_get_current_tpc_is_the_open_attachment():
    from hwquant.target_platform_capabilities import FrameworkQuantizationCapabilities, get_current_tpc
    fqc = FrameworkQuantizationCapabilities(get_target_platform_capabilities())
    with pytest.raises(InvalidTPCError, match="inside a `with fqc:` block"):
        get_current_tpc()
    with fqc:
        assert get_current_tpc() is fqc


def test_a_tpc_object_of_another_package_is_read_through_its_json_form():
    from hwquant.tpc import load_target_platform_capabilities
    from hwquant.tpc.serialization import tpc_to_dict
    ours = get_target_platform_capabilities("4.0")

    class TargetPlatformCapabilities:  # what MCT / edge-mdt-tpc hand over: a pydantic model of the same schema
        def model_dump(self, mode="python"):
            return tpc_to_dict(ours)
    assert load_target_platform_capabilities(TargetPlatformCapabilities()) == ours


def test_each_call_returns_an_equal_fresh_object():
    a, b = get_target_platform_capabilities("6.0"), get_target_platform_capabilities("6.0")
    assert a == b
