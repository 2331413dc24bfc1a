"""TPC schema: construction rules, editing, the older positional forms, presentation."""
import pytest
from pydantic import ValidationError

from hwquant.constants import BIAS_ATTR, KERNEL_ATTR
from hwquant.tpc import (AttributeQuantizationConfig, Fusing, OperatorSetConcat, OperatorSetGroup, OperatorSetNames,
                         OperatorsSet, OpQuantizationConfig, QuantizationConfigOptions, QuantizationMethod, Signedness,
                         TargetPlatformCapabilities, get_target_platform_capabilities)

KERNEL = AttributeQuantizationConfig(weights_quantization_method=QuantizationMethod.SYMMETRIC, weights_n_bits=8,
                                     weights_per_channel_threshold=True, enable_weights_quantization=True)


def make_op(**overrides):
    fields = dict(default_weight_attr_config=AttributeQuantizationConfig(), attr_weights_configs_mapping={KERNEL_ATTR: KERNEL},
                  activation_quantization_method=QuantizationMethod.POWER_OF_TWO, activation_n_bits=8,
                  supported_input_activation_n_bits=8, enable_activation_quantization=True,
                  quantization_preserving=False, fixed_scale=None, fixed_zero_point=None, simd_size=32,
                  signedness=Signedness.AUTO)
    fields.update(overrides)
    return OpQuantizationConfig(**fields)


def one(cfg=None):
    return QuantizationConfigOptions(quantization_configurations=[cfg or make_op()])


def test_enum_values_match_documented_api():
    assert [m.value for m in (QuantizationMethod.POWER_OF_TWO, QuantizationMethod.LUT_POT_QUANTIZER,
                              QuantizationMethod.SYMMETRIC, QuantizationMethod.UNIFORM,
                              QuantizationMethod.LUT_SYM_QUANTIZER)] == [0, 1, 2, 3, 4]
    assert QuantizationMethod.SYMMETRIC_UNIFORM is QuantizationMethod.SYMMETRIC
    assert [s.value for s in Signedness] == [0, 1, 2]
    assert OperatorSetNames.DEPTHWISE_CONV.value == "DepthwiseConv2D"
    assert "IndexSelect" in OperatorSetNames.get_values() and len(OperatorSetNames.get_values()) == 62


def test_models_are_frozen():
    cfg = make_op()
    with pytest.raises(ValidationError):
        cfg.activation_n_bits = 4


@pytest.mark.parametrize("overrides,message", [
    (dict(activation_n_bits=1), "activation_n_bits=1"),
    (dict(activation_n_bits=17), "activation_n_bits=17"),
    (dict(activation_n_bits=32), "activation_n_bits=32"),
    (dict(supported_input_activation_n_bits=()), "at least one"),
    (dict(supported_input_activation_n_bits=(8, 3, 1)), "supported_input_activation_n_bits=1"),
    (dict(activation_quantization_method=QuantizationMethod.LUT_POT_QUANTIZER), "weights only"),
    (dict(fixed_scale=-1.0, fixed_zero_point=0), "fixed_scale"),
    (dict(fixed_zero_point=3), "without fixed_scale"),
    (dict(simd_size=0), "simd_size"),
    (dict(quantization_preserving=True, fixed_scale=0.5, fixed_zero_point=0), "quantization_preserving"),
    (dict(attr_weights_configs_mapping={"": KERNEL}), "non-empty"),
    (dict(signedness=7), "signedness"),
    (dict(activation_quantization_method=9), "activation_quantization_method"),
])
def test_op_config_rules(overrides, message):
    with pytest.raises(ValidationError, match=message):
        make_op(**overrides)


def test_float_bit_width_only_where_not_quantized():
    make_op(enable_activation_quantization=False, activation_n_bits=32)
    AttributeQuantizationConfig(weights_n_bits=32, enable_weights_quantization=False)
    with pytest.raises(ValidationError, match="weights_n_bits=32"):
        AttributeQuantizationConfig(weights_n_bits=32, enable_weights_quantization=True)
    with pytest.raises(ValidationError, match="lut_values_bitwidth=1"):
        AttributeQuantizationConfig(lut_values_bitwidth=1)


def test_unknown_field_is_refused():
    with pytest.raises(ValidationError, match="extra"):
        AttributeQuantizationConfig(weights_nbits=8)


def test_clone_and_edit_validates_and_edits_attributes():
    cfg = make_op()
    four = cfg.clone_and_edit(attr_to_edit={KERNEL_ATTR: {"weights_n_bits": 4}}, simd_size=64)
    assert four.attr_weights_configs_mapping[KERNEL_ATTR].weights_n_bits == 4 and four.simd_size == 64
    assert cfg.attr_weights_configs_mapping[KERNEL_ATTR].weights_n_bits == 8  # original untouched
    with pytest.raises(ValidationError, match="activation_n_bits=0"):
        cfg.clone_and_edit(activation_n_bits=0)
    with pytest.raises(ValueError, match="no field"):
        cfg.clone_and_edit(activation_bits=4)
    with pytest.raises(ValueError, match="does not have"):
        cfg.clone_and_edit(attr_to_edit={BIAS_ATTR: {"weights_n_bits": 4}})


def test_config_options_rules():
    a, b = make_op(), make_op(activation_n_bits=4)
    assert one(a).base_config == a  # single option is its own base
    with pytest.raises(ValidationError, match="base_config is required"):
        QuantizationConfigOptions(quantization_configurations=[a, b])
    with pytest.raises(ValidationError, match="must be one of"):
        QuantizationConfigOptions(quantization_configurations=[a, b], base_config=make_op(activation_n_bits=2))
    with pytest.raises(ValidationError, match="empty"):
        QuantizationConfigOptions(quantization_configurations=[])
    with pytest.raises(ValidationError, match="same configuration twice"):
        QuantizationConfigOptions(quantization_configurations=[a, make_op()], base_config=a)


def test_config_options_editing_keeps_base():
    a, b = make_op(), make_op(activation_n_bits=4)
    qco = QuantizationConfigOptions([a, b], base_config=b)  # older positional form
    edited = qco.clone_and_edit(simd_size=16)
    assert all(c.simd_size == 16 for c in edited.quantization_configurations)
    assert edited.base_config.activation_n_bits == 4
    pc = qco.clone_and_edit_weight_attribute(weights_per_channel_threshold=False)
    assert not pc.base_config.attr_weights_configs_mapping[KERNEL_ATTR].weights_per_channel_threshold
    mapped = qco.clone_and_map_weights_attr_keys({KERNEL_ATTR: "weight"})
    assert list(mapped.base_config.attr_weights_configs_mapping) == ["weight"]
    assert qco.quantization_config_list == list(qco.quantization_configurations)


def test_operator_sets_groups_and_fusing():
    conv = OperatorsSet(OperatorSetNames.CONV, one())  # older positional form, enum name
    assert conv.name == "Conv" and isinstance(conv.name, str)
    relu, relu6 = OperatorsSet(name="ReLU"), OperatorsSet(name="ReLU6")
    group = OperatorSetConcat(relu, relu6)
    assert isinstance(group, OperatorSetGroup) and group.name == "ReLU_ReLU6"
    fusing = Fusing([conv, group])
    assert fusing.name == "Conv_ReLU_ReLU6"
    assert fusing.contains(Fusing(operator_groups=[conv, relu]))
    assert not fusing.contains(Fusing(operator_groups=[relu, conv]))
    with pytest.raises(ValidationError, match="at least two"):
        Fusing(operator_groups=[conv])
    with pytest.raises(ValidationError, match="at least one"):
        OperatorSetGroup(operators_set=[])
    with pytest.raises(ValidationError, match="non-empty name"):
        OperatorsSet(name=" ")
    with pytest.raises(TypeError, match="positional"):
        OperatorsSet("Conv", one(), "extra")


def test_tpc_rules():
    conv, relu = OperatorsSet(name="Conv"), OperatorsSet(name="ReLU")
    with pytest.raises(ValidationError, match="exactly one option"):
        TargetPlatformCapabilities(default_qco=QuantizationConfigOptions([make_op(), make_op(activation_n_bits=4)],
                                                                         base_config=make_op()))
    with pytest.raises(ValidationError, match="unique"):
        TargetPlatformCapabilities(default_qco=one(), operator_set=[conv, OperatorsSet(name="Conv")])
    with pytest.raises(ValidationError, match="not in operator_set"):
        TargetPlatformCapabilities(default_qco=one(), operator_set=[conv], fusing_patterns=[Fusing([conv, relu])])
    with pytest.raises(ValidationError, match="same pattern twice"):
        TargetPlatformCapabilities(default_qco=one(), operator_set=[conv, relu],
                                   fusing_patterns=[Fusing([conv, relu]), Fusing([conv, relu], name="again")])
    with pytest.raises(ValidationError, match="SCHEMA_VERSION"):
        TargetPlatformCapabilities(default_qco=one(), SCHEMA_VERSION=1)
    with pytest.raises(ValidationError, match="tpc_minor_version"):
        TargetPlatformCapabilities(default_qco=one(), tpc_minor_version=-1)


def test_tpc_queries():
    tpc = get_target_platform_capabilities("4.0")
    conv = tpc.get_config_options_by_operators_set("Conv")
    assert conv.base_config.attr_weights_configs_mapping[KERNEL_ATTR].weights_n_bits == 8
    assert tpc.get_config_options_by_operators_set("Softmax") == tpc.default_qco  # absent: defaults
    assert tpc.get_config_options_by_operators_set(OperatorSetNames.RELU) is tpc.get_opset_by_name("ReLU").qc_options
    assert tpc.version == "4.0"


def test_show_is_readable(capsys):
    get_target_platform_capabilities("4.0").show()
    out = capsys.readouterr().out
    assert "TPC 'imx500_tpc' platform=imx500 version=4.0" in out
    assert "Conv: activation POWER_OF_TWO 8b; bias_attr float; kernel_attr SYMMETRIC 8b per-channel" in out
    assert "kernel_attr SYMMETRIC 2b per-channel" in out
    assert "Reshape: preserves its input's quantization" in out
    assert "(Conv | ConvTranspose | DepthwiseConv2D) -> (ReLU" in out
    assert get_target_platform_capabilities().get_info()["Model name"] == "imx500_tpc"
