"""Layer filters, attaching layers to operator sets, and the older `with tp_model:` API."""
import pytest

import hwquant.target_platform as tp
from hwquant.constants import KERNEL_ATTR
from hwquant.core.configuration.config import DefaultDict
from hwquant.errors import InvalidTPCError
from hwquant.tpc import (Contains, Eq, FrameworkQuantizationCapabilities, Greater, GreaterEq, LayerFilterParams, NotEq,
                         OperationsSetToLayers, OperationsToLayers, Smaller, SmallerEq,
                         get_target_platform_capabilities, load_target_platform_capabilities)


class Conv2d: ...
class Linear: ...
class ReLU: ...
class Hardtanh: ...


def test_attribute_filters():
    attrs = {"min_val": 0, "max_val": 6, "mode": "nearest", "dims": (1, 2)}
    assert Eq("min_val", 0).match(attrs) and not Eq("min_val", 1).match(attrs)
    assert NotEq("max_val", 1).match(attrs)
    assert Greater("max_val", 5).match(attrs) and not Greater("max_val", 6).match(attrs)
    assert GreaterEq("max_val", 6).match(attrs) and Smaller("min_val", 1).match(attrs) and SmallerEq("min_val", 0).match(attrs)
    assert Contains("dims", 2).match(attrs) and Contains("mode", "near").match(attrs)
    assert not Eq("absent", 0).match(attrs) and not NotEq("absent", 0).match(attrs)
    assert not Greater("mode", 1).match(attrs)  # incomparable types: no match, no crash
    both = Eq("min_val", 0) & Smaller("max_val", 7)
    either = Eq("min_val", 5) | Eq("max_val", 6)
    assert both.match(attrs) and either.match(attrs)
    assert not (Eq("min_val", 5) & Eq("max_val", 6)).match(attrs)
    assert (Eq("min_val", 5) | Eq("max_val", 5) | Eq("mode", "nearest")).match(attrs)  # chains of three work
    assert repr(both) == "(min_val == 0 & max_val < 7)"
    with pytest.raises(ValueError, match="attr"):
        Eq("", 1)
    with pytest.raises(TypeError, match="combine"):
        Eq("a", 1) & 3


def test_layer_filter_params():
    relu6_like = LayerFilterParams(Hardtanh, Eq("min_val", 0), max_val=6)
    assert relu6_like.match(Hardtanh, {"min_val": 0, "max_val": 6})
    assert not relu6_like.match(Hardtanh, {"min_val": 0, "max_val": 1})
    assert not relu6_like.match(ReLU, {"min_val": 0, "max_val": 6})
    assert relu6_like == LayerFilterParams(Hardtanh, Eq("min_val", 0), max_val=6)
    assert "Hardtanh" in repr(relu6_like)
    with pytest.raises(TypeError, match="attribute filters"):
        LayerFilterParams(Hardtanh, "min_val")


def test_operations_to_layers_lookup():
    conv = OperationsSetToLayers("Conv", [Conv2d], attr_mapping={KERNEL_ATTR: DefaultDict(default_value="weight")})
    relu = OperationsSetToLayers("ReLU", [ReLU, LayerFilterParams(Hardtanh, min_val=0)])
    hard = OperationsSetToLayers("HardTanh", [Hardtanh])
    ops = OperationsToLayers([conv, relu, hard])
    assert ops.find(Conv2d) is conv and ops.find(Linear) is None
    assert ops.find(Hardtanh, {"min_val": 0}) is relu  # the filter is more specific than the plain type
    assert ops.find(Hardtanh, {"min_val": -1}) is hard
    assert conv.layer_attr_name(KERNEL_ATTR, Conv2d) == "weight"
    assert ops.get_layers_by_op("ReLU")[0] is ReLU
    with pytest.raises(ValueError, match="already belong"):
        ops.add(OperationsSetToLayers("Conv2", [Conv2d]))
    with pytest.raises(ValueError, match="attached twice"):
        ops.add(OperationsSetToLayers("Conv", [Linear]))
    with pytest.raises(TypeError, match="list of layer"):
        OperationsSetToLayers("Conv", "Conv2d")


def test_framework_attachment_gives_options_with_layer_attribute_names():
    fqc = FrameworkQuantizationCapabilities(get_target_platform_capabilities("1.0"))
    with fqc:
        OperationsSetToLayers("Conv", [Conv2d], attr_mapping={KERNEL_ATTR: "weight", "bias_attr": "bias"})
        OperationsSetToLayers("ReLU", [ReLU])
    qco = fqc.get_qco(Conv2d)
    assert set(qco.base_config.attr_weights_configs_mapping) == {"weight", "bias"}
    assert len(qco.quantization_configurations) == 3
    assert fqc.get_qco(Linear) == fqc.default_qco  # not attached: defaults
    assert fqc.opset_of(ReLU) == "ReLU" and fqc.opset_of(Linear) is None
    assert fqc.fusing_patterns_as_layers()[0][0] == [Conv2d]
    with pytest.raises(InvalidTPCError, match="'Convolution'.*does not define"):
        with fqc:
            OperationsSetToLayers("Convolution", [Linear])
    assert fqc.opset_of(Linear) is None  # the refused attachment left nothing behind


def test_older_with_block_api_builds_a_tpc():
    default = get_target_platform_capabilities().default_qco
    model = tp.TargetPlatformModel(default, name="legacy")
    with model:
        model.set_simd_padding(True)
        mixed = tp.get_default_quantization_config_options().clone_and_edit(activation_n_bits=4)
        conv = tp.OperatorsSet("Conv", mixed)
        relu, relu6 = tp.OperatorsSet("ReLU"), tp.OperatorsSet("ReLU6")
        tp.Fusing([conv, tp.OperatorSetConcat(relu, relu6)])
    assert model.name == "legacy" and model.is_simd_padding
    assert [s.name for s in model.operator_set] == ["Conv", "ReLU", "ReLU6"]
    assert model.fusing_patterns[0].name == "Conv_ReLU_ReLU6"
    assert load_target_platform_capabilities(model) is model.tpc
    old_tpc = tp.TargetPlatformCapabilities(model, name="pytorch")
    with old_tpc:
        tp.OperationsSetToLayers("Conv", [Conv2d])
    assert old_tpc.get_qco(Conv2d).base_config.activation_n_bits == 4
    with pytest.raises(InvalidTPCError, match="already built"):
        with model:
            pass


def test_older_api_errors():
    with pytest.raises(InvalidTPCError, match="only available inside"):
        tp.get_default_quantization_config_options()
    model = tp.TargetPlatformModel(get_target_platform_capabilities().default_qco)
    with pytest.raises(InvalidTPCError, match="not built yet"):
        _ = model.operator_set
    with pytest.raises(ValueError, match="unique"):
        with model:
            tp.OperatorsSet("Conv")
            tp.OperatorsSet("Conv")
