"""Network editor: filters and their combinators, edit rules, action validation and apply() on stand-ins."""
from types import SimpleNamespace

import pytest

from hwquant.core.configuration.config import QuantizationErrorMethod
from hwquant.core.configuration.network_editor import (BaseAction, ChangeCandidatesActivationQuantConfigAttr,
                                                       ChangeCandidatesActivationQuantizationMethod,
                                                       ChangeCandidatesWeightsQuantConfigAttr,
                                                       ChangeCandidatesWeightsQuantizationMethod,
                                                       ChangeFinalActivationQuantConfigAttr, ChangeFinalWeightsQuantConfigAttr,
                                                       ChangeFinalWeightsQuantizationMethod, ChangeQuantizationParamFunction,
                                                       EditRule, NodeAnyMatcher, NodeNameFilter, NodeNameScopeFilter,
                                                       NodeTypeFilter)
from hwquant.tpc.enums import QuantizationMethod, Signedness


class Conv2D:
    pass


class Dense:
    pass


def relu(x):
    return x


def node(name, type_):
    return SimpleNamespace(name=name, type=type_)


CONV, DENSE, ACT = node("block1/conv", Conv2D), node("head/dense", Dense), node("block1/relu", relu)


# ---------------------------------------------------------------- filters

def test_basic_filters():
    assert NodeTypeFilter(Conv2D).match(CONV) and not NodeTypeFilter(Conv2D).match(DENSE)
    assert NodeTypeFilter(relu).match(ACT)
    assert NodeNameFilter("head/dense").match(DENSE) and not NodeNameFilter("head").match(DENSE)
    assert NodeNameScopeFilter("block1").match(CONV) and NodeNameScopeFilter("block1").match(ACT)
    assert not NodeNameScopeFilter("block1").match(DENSE)
    assert NodeAnyMatcher().match(DENSE)
    assert NodeTypeFilter(Conv2D).apply(CONV) is True  # MCT's name; always a bool
    assert NodeNameFilter("x").apply(CONV) is False


def test_type_filter_is_exact():
    class MyConv(Conv2D):
        pass

    assert not NodeTypeFilter(Conv2D).match(node("c", MyConv))


def test_combinators():
    conv_in_block1 = NodeTypeFilter(Conv2D) & NodeNameScopeFilter("block1")
    assert conv_in_block1.match(CONV) and not conv_in_block1.match(ACT)
    either = NodeTypeFilter(Dense) | NodeTypeFilter(relu)
    assert either.match(DENSE) and either.match(ACT) and not either.match(CONV)
    not_block1 = ~NodeNameScopeFilter("block1")
    assert not_block1.match(DENSE) and not not_block1.match(CONV)
    nested = (NodeTypeFilter(Conv2D) | NodeTypeFilter(Dense)) & ~NodeNameScopeFilter("head")
    assert [nested.match(n) for n in (CONV, DENSE, ACT)] == [True, False, False]
    # MCT's spelling
    assert NodeTypeFilter(Conv2D).logic_or(NodeTypeFilter(Dense)).match(DENSE)
    assert NodeTypeFilter(Conv2D).logic_and(NodeNameFilter("x")).match(CONV) is False
    assert NodeTypeFilter(Conv2D).logic_not().match(DENSE)
    assert "block1" in repr(conv_in_block1) and "&" in repr(conv_in_block1)


def test_filter_equality_and_errors():
    assert NodeNameFilter("a") == NodeNameFilter("a") and NodeNameFilter("a") != NodeNameScopeFilter("a")
    assert len({NodeTypeFilter(Conv2D), NodeTypeFilter(Conv2D)}) == 1
    with pytest.raises(TypeError, match="node_type"):
        NodeTypeFilter(None)
    with pytest.raises(TypeError, match="node_name"):
        NodeNameFilter(3)
    with pytest.raises(TypeError, match="node_name_scope"):
        NodeNameScopeFilter("")
    with pytest.raises(TypeError, match="combines node filters"):
        NodeNameFilter("a") & "b"
    with pytest.raises(TypeError, match=r"\.type"):
        NodeTypeFilter(Conv2D).match(SimpleNamespace(name="n"))


# ---------------------------------------------------------------- edit rules / action construction

def test_edit_rule():
    action = ChangeCandidatesWeightsQuantConfigAttr(attr_name="kernel_attr", weights_n_bits=9 - 1)
    rule = EditRule(filter=NodeTypeFilter(Conv2D), action=action)
    f, a = rule
    assert f == NodeTypeFilter(Conv2D) and a is action and rule.action is action
    assert "NodeTypeFilter" in repr(rule) and "weights_n_bits" in repr(rule)
    with pytest.raises(TypeError, match="filter"):
        EditRule(Conv2D, action)
    with pytest.raises(TypeError, match="action"):
        EditRule(NodeTypeFilter(Conv2D), {"weights_n_bits": 4})


def test_action_field_names_checked_at_construction():
    with pytest.raises(ValueError) as e:
        ChangeCandidatesActivationQuantConfigAttr(activation_nbits=4)
    assert "activation_nbits" in str(e.value) and "activation_n_bits" in str(e.value)  # names the valid fields
    with pytest.raises(ValueError, match="weights_nbits"):
        ChangeFinalWeightsQuantConfigAttr(weights_nbits=4)
    with pytest.raises(ValueError, match="activation_n_bits"):
        ChangeCandidatesWeightsQuantConfigAttr(activation_n_bits=4)  # activation field on a weights action
    with pytest.raises(ValueError, match="at least one field"):
        ChangeFinalActivationQuantConfigAttr()


@pytest.mark.parametrize("make, words", [
    (lambda: ChangeCandidatesActivationQuantConfigAttr(activation_n_bits=1), ["activation_n_bits=1", "2 to 16"]),
    (lambda: ChangeCandidatesActivationQuantConfigAttr(activation_n_bits=8.0), ["activation_n_bits"]),
    (lambda: ChangeCandidatesActivationQuantConfigAttr(enable_activation_quantization="no"),
     ["enable_activation_quantization", "True or False"]),
    (lambda: ChangeCandidatesActivationQuantConfigAttr(activation_error_method=QuantizationMethod.SYMMETRIC),
     ["activation_error_method", "QuantizationErrorMethod"]),
    (lambda: ChangeCandidatesActivationQuantConfigAttr(signedness="signed"), ["signedness", "Signedness"]),
    (lambda: ChangeCandidatesActivationQuantConfigAttr(shift_negative_ratio=2), ["shift_negative_ratio", "<= 1"]),
    (lambda: ChangeCandidatesActivationQuantConfigAttr(z_threshold=0), ["z_threshold", "> 0"]),
    (lambda: ChangeCandidatesWeightsQuantConfigAttr(weights_n_bits=33), ["weights_n_bits=33"]),
    (lambda: ChangeCandidatesWeightsQuantConfigAttr(weights_quantization_method=7),
     ["weights_quantization_method=7", "QuantizationMethod"]),
    (lambda: ChangeCandidatesWeightsQuantConfigAttr(attr_name="", weights_n_bits=4), ["attr_name"]),
    (lambda: ChangeCandidatesWeightsQuantConfigAttr(attr_name=-1, weights_n_bits=4), ["attr_name=-1"]),
    (lambda: ChangeCandidatesActivationQuantizationMethod("POT"), ["activation_quantization_method"]),
    (lambda: ChangeCandidatesActivationQuantizationMethod(None), ["activation_quantization_method"]),
    (lambda: ChangeCandidatesWeightsQuantizationMethod(None, 10), ["weights_quantization_method"]),
    (lambda: ChangeCandidatesWeightsQuantizationMethod("kernel"), ["weights_quantization_method must be given"]),
    (lambda: ChangeCandidatesWeightsQuantizationMethod(QuantizationMethod.UNIFORM), ["attribute comes first"]),
    (lambda: ChangeFinalWeightsQuantizationMethod(3.5, QuantizationMethod.UNIFORM), ["attr_name"]),
    (lambda: ChangeQuantizationParamFunction(), ["activation_quantization_params_fn"]),
    (lambda: ChangeQuantizationParamFunction(weights_quantization_params_fn="mse"),
     ["weights_quantization_params_fn", "callable"]),
])
def test_action_values_checked_at_construction(make, words):
    with pytest.raises(ValueError) as e:
        make()
    for w in words:
        assert w in str(e.value)


def test_action_values_coerced():
    a = ChangeCandidatesActivationQuantConfigAttr(activation_quantization_method=3, activation_error_method=0,
                                                  signedness=1)
    assert a.kwargs == {"activation_quantization_method": QuantizationMethod.UNIFORM,
                        "activation_error_method": QuantizationErrorMethod.NOCLIPPING,
                        "signedness": Signedness.SIGNED}
    assert ChangeCandidatesWeightsQuantizationMethod(None, 0).weights_quantization_method is QuantizationMethod.POWER_OF_TWO
    assert ChangeCandidatesActivationQuantizationMethod(QuantizationMethod.SYMMETRIC) == \
        ChangeCandidatesActivationQuantizationMethod(2)


# ---------------------------------------------------------------- apply() on stand-in configs

class AttrCfg(SimpleNamespace):
    pass


class WeightsCfg:
    def __init__(self, attrs):
        self.weights_bias_correction = True
        self.min_threshold = 1e-5
        self._attrs = {name: AttrCfg(weights_n_bits=8, weights_quantization_method=QuantizationMethod.POWER_OF_TWO,
                                     weights_per_channel_threshold=True, enable_weights_quantization=True,
                                     weights_quantization_params_fn=None) for name in attrs}

    @property
    def all_weight_attrs(self):
        return list(self._attrs)

    def get_attr_config(self, name):
        return self._attrs[name]


def candidate(attrs=("kernel", "bias")):
    act = SimpleNamespace(activation_n_bits=8, activation_quantization_method=QuantizationMethod.POWER_OF_TWO,
                          enable_activation_quantization=True, activation_quantization_params_fn=None)
    return SimpleNamespace(activation_quantization_cfg=act, weights_quantization_cfg=WeightsCfg(attrs))


def test_candidates_activation_action_applies_only_at_candidates_stage():
    cands = [candidate(), candidate()]
    action = ChangeCandidatesActivationQuantConfigAttr(activation_n_bits=4, enable_activation_quantization=False)
    assert action.apply(cands, final=True) == 0
    assert all(c.activation_quantization_cfg.activation_n_bits == 8 for c in cands)
    assert action.apply(cands, final=False) == 2
    assert all(c.activation_quantization_cfg.activation_n_bits == 4 for c in cands)
    assert not any(c.activation_quantization_cfg.enable_activation_quantization for c in cands)


def test_final_activation_action_applies_only_at_final_stage():
    final = candidate()
    action = ChangeFinalActivationQuantConfigAttr(activation_n_bits=2)
    assert action.apply([final]) == 0  # default stage: candidates
    assert action.apply([final], final=True) == 1 and final.activation_quantization_cfg.activation_n_bits == 2


def test_weights_action_one_attribute_or_all():
    c = candidate()
    ChangeCandidatesWeightsQuantConfigAttr(attr_name="kernel", weights_n_bits=4).apply([c])
    w = c.weights_quantization_cfg
    assert (w.get_attr_config("kernel").weights_n_bits, w.get_attr_config("bias").weights_n_bits) == (4, 8)
    ChangeCandidatesWeightsQuantConfigAttr(enable_weights_quantization=False, weights_bias_correction=False).apply([c])
    assert not any(w.get_attr_config(a).enable_weights_quantization for a in ("kernel", "bias"))
    assert w.weights_bias_correction is False  # node-wide field set on the weights config itself
    final = candidate()
    assert ChangeFinalWeightsQuantConfigAttr(attr_name="bias", weights_per_channel_threshold=False) \
        .apply([final], final=True) == 1
    assert final.weights_quantization_cfg.get_attr_config("bias").weights_per_channel_threshold is False


def test_method_actions():
    cands = [candidate(), candidate()]
    ChangeCandidatesActivationQuantizationMethod(QuantizationMethod.UNIFORM).apply(cands)
    assert all(c.activation_quantization_cfg.activation_quantization_method is QuantizationMethod.UNIFORM
               for c in cands)
    ChangeCandidatesWeightsQuantizationMethod("kernel", QuantizationMethod.SYMMETRIC).apply(cands)  # MCT's order
    w = cands[0].weights_quantization_cfg
    assert w.get_attr_config("kernel").weights_quantization_method is QuantizationMethod.SYMMETRIC
    assert w.get_attr_config("bias").weights_quantization_method is QuantizationMethod.POWER_OF_TWO
    final = candidate()
    a = ChangeFinalWeightsQuantizationMethod(weights_quantization_method=QuantizationMethod.LUT_POT_QUANTIZER)
    assert a.apply([final]) == 0 and a.apply([final], final=True) == 1
    assert all(final.weights_quantization_cfg.get_attr_config(n).weights_quantization_method
               is QuantizationMethod.LUT_POT_QUANTIZER for n in ("kernel", "bias"))


def test_param_function_action():
    def act_fn(*a, **k): return {}
    def w_fn(*a, **k): return {}
    c = candidate()
    assert ChangeQuantizationParamFunction(activation_quantization_params_fn=act_fn).apply([c]) == 1
    assert c.activation_quantization_cfg.activation_quantization_params_fn is act_fn
    assert c.weights_quantization_cfg.get_attr_config("kernel").weights_quantization_params_fn is None
    ChangeQuantizationParamFunction(attr_name="kernel", weights_quantization_params_fn=w_fn).apply([c])
    w = c.weights_quantization_cfg
    assert w.get_attr_config("kernel").weights_quantization_params_fn is w_fn
    assert w.get_attr_config("bias").weights_quantization_params_fn is None
    assert ChangeQuantizationParamFunction(activation_quantization_params_fn=act_fn).apply([c], final=True) == 0


def test_apply_skips_missing_parts_and_reports_unknown_fields():
    no_weights = SimpleNamespace(activation_quantization_cfg=candidate().activation_quantization_cfg,
                                 weights_quantization_cfg=None)
    assert ChangeCandidatesWeightsQuantConfigAttr(weights_n_bits=4).apply([no_weights, None]) == 0
    c = candidate()
    with pytest.raises(AttributeError, match="z_threshold"):
        ChangeCandidatesActivationQuantConfigAttr(z_threshold=3.0).apply([c])


def test_base_action_is_abstract():
    class Noop(BaseAction):
        pass
    with pytest.raises(NotImplementedError):
        Noop().apply([candidate()])
