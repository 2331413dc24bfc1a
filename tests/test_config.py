"""Core configuration objects: defaults, both spellings, validation, resource targets, manual bit widths."""
import copy
import math

import pytest

from hwquant.constants import BIAS_ATTR, KERNEL_ATTR, MIN_THRESHOLD
from hwquant.core.configuration.config import (BitWidthConfig, CoreConfig, DebugConfig, DefaultDict, ManualBitWidthSelection,
                                               ManualWeightsBitWidthSelection, MixedPrecisionQuantizationConfig,
                                               MpDistanceWeighting, MpMetricNormalization, QuantizationConfig,
                                               QuantizationErrorMethod, ResourceUtilization, RUTarget, ThresholdSelectionMethod,
                                               UserInformation)
from hwquant.core.configuration.network_editor import (ChangeCandidatesWeightsQuantConfigAttr, EditRule, NodeNameFilter,
                                                      NodeTypeFilter)
from hwquant.tpc.enums import QuantizationMethod


def _refused(fn, *words, exc=(ValueError, TypeError)):
    """fn() must fail, and the message must contain each of `words` (field name, value, rule)."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in message: {msg}"
    return msg


# ---------------------------------------------------------------- QuantizationErrorMethod

def test_error_method_values_and_aliases():
    assert [(m.name, m.value) for m in QuantizationErrorMethod] == [
        ("NOCLIPPING", 0), ("MSE", 1), ("MAE", 2), ("KL", 4), ("LP", 5), ("HMSE", 6)]
    assert ThresholdSelectionMethod is QuantizationErrorMethod
    assert ThresholdSelectionMethod.Lp is QuantizationErrorMethod.LP


# ---------------------------------------------------------------- QuantizationConfig

MCT_DEFAULTS = dict(
    activation_error_method=QuantizationErrorMethod.MSE, weights_error_method=QuantizationErrorMethod.MSE,
    relu_bound_to_power_of_2=False, weights_bias_correction=True, weights_second_moment_correction=False,
    input_scaling=False, softmax_shift=False, shift_negative_activation_correction=True,
    activation_channel_equalization=False, z_threshold=math.inf, min_threshold=2 ** -16, l_p_value=2,
    linear_collapsing=True, residual_collapsing=True, shift_negative_ratio=0.05,
    shift_negative_threshold_recalculation=False, shift_negative_params_search=False,
    concat_threshold_update=False, activation_bias_correction=False, activation_bias_correction_threshold=0.0,
    custom_tpc_opset_to_layer=None)


def test_quantization_config_defaults():
    qc = QuantizationConfig()
    for k, v in MCT_DEFAULTS.items():
        assert getattr(qc, k) == v, k
    assert qc.min_threshold == MIN_THRESHOLD
    assert qc.tpc_overrides() == {}
    for k in ("activation_quantization_method", "weights_quantization_method", "activation_n_bits",
              "weights_n_bits", "weights_per_channel_threshold", "enable_weights_quantization",
              "enable_activation_quantization"):
        assert getattr(qc, k) is None


def test_seed_example_runs_and_maps_old_names():
    qc = QuantizationConfig(activation_n_bits=6, weights_n_bits=7,
                            activation_quantization_method=QuantizationMethod.SYMMETRIC_UNIFORM,
                            weights_quantization_method=QuantizationMethod.SYMMETRIC_UNIFORM,
                            weights_threshold_method=ThresholdSelectionMethod.MSE,
                            activation_threshold_method=ThresholdSelectionMethod.NOCLIPPING,
                            relu_unbound_correction=True, weights_bias_correction=True,
                            weights_per_channel_threshold=True)
    assert qc.activation_error_method is QuantizationErrorMethod.NOCLIPPING
    assert qc.weights_error_method is QuantizationErrorMethod.MSE
    assert qc.relu_bound_to_power_of_2 is True
    # old names read and write
    assert qc.activation_threshold_method is QuantizationErrorMethod.NOCLIPPING
    assert qc.weights_threshold_method is QuantizationErrorMethod.MSE
    assert qc.relu_unbound_correction is True
    qc.activation_threshold_method = QuantizationErrorMethod.KL
    assert qc.activation_error_method is QuantizationErrorMethod.KL
    assert qc.tpc_overrides() == {
        "activation_quantization_method": QuantizationMethod.SYMMETRIC,
        "weights_quantization_method": QuantizationMethod.SYMMETRIC,
        "activation_n_bits": 6, "weights_n_bits": 7, "weights_per_channel_threshold": True}


def test_mct_example_and_positional_form():
    qc = QuantizationConfig(activation_error_method=QuantizationErrorMethod.NOCLIPPING,
                            weights_error_method=QuantizationErrorMethod.MSE, relu_bound_to_power_of_2=True,
                            weights_bias_correction=True)
    assert qc.relu_bound_to_power_of_2
    qc2 = QuantizationConfig(QuantizationErrorMethod.MAE, QuantizationErrorMethod.KL, relu_bound_to_power_of_2=True)
    assert (qc2.activation_error_method, qc2.weights_error_method) == (QuantizationErrorMethod.MAE,
                                                                       QuantizationErrorMethod.KL)
    _refused(lambda: QuantizationConfig(QuantizationErrorMethod.MAE, activation_error_method=1),
             "activation_error_method", "two values")
    _refused(lambda: QuantizationConfig(*([True] * 22)), "at most 21")


def test_both_spellings_same_value_ok_different_value_refused():
    qc = QuantizationConfig(activation_threshold_method=1, activation_error_method=QuantizationErrorMethod.MSE)
    assert qc.activation_error_method is QuantizationErrorMethod.MSE
    _refused(lambda: QuantizationConfig(weights_threshold_method=QuantizationErrorMethod.KL,
                                        weights_error_method=QuantizationErrorMethod.MSE),
             "weights_threshold_method", "weights_error_method", "different values")
    _refused(lambda: QuantizationConfig(relu_unbound_correction=True, relu_bound_to_power_of_2=False),
             "relu_unbound_correction", "relu_bound_to_power_of_2")


def test_enums_accept_ints_and_refuse_other_enums():
    qc = QuantizationConfig(activation_error_method=4, weights_quantization_method=3)
    assert qc.activation_error_method is QuantizationErrorMethod.KL
    assert qc.weights_quantization_method is QuantizationMethod.UNIFORM
    # QuantizationMethod.SYMMETRIC == 2 == MAE by value: must not slip through
    _refused(lambda: QuantizationConfig(activation_error_method=QuantizationMethod.SYMMETRIC),
             "activation_error_method", "QuantizationErrorMethod")
    _refused(lambda: QuantizationConfig(weights_error_method=3), "weights_error_method", "3", "valid")
    _refused(lambda: QuantizationConfig(activation_quantization_method=9), "activation_quantization_method", "9")


@pytest.mark.parametrize("field, value, words", [
    ("z_threshold", 0, ["z_threshold", "> 0"]),
    ("z_threshold", -1.5, ["z_threshold", "-1.5"]),
    ("z_threshold", float("nan"), ["z_threshold", "NaN"]),
    ("min_threshold", 0, ["min_threshold", "> 0"]),
    ("min_threshold", math.inf, ["min_threshold", "finite"]),
    ("l_p_value", 0, ["l_p_value", ">= 1"]),
    ("l_p_value", 2.5, ["l_p_value", "integer"]),
    ("shift_negative_ratio", 1.5, ["shift_negative_ratio", "from 0 to 1"]),
    ("shift_negative_ratio", -0.1, ["shift_negative_ratio"]),
    ("activation_bias_correction_threshold", -1, ["activation_bias_correction_threshold", ">= 0"]),
    ("weights_bias_correction", "yes", ["weights_bias_correction", "True or False"]),
    ("linear_collapsing", 1, ["linear_collapsing", "True or False"]),
    ("activation_n_bits", 1, ["activation_n_bits", "2 to 16"]),
    ("weights_n_bits", 17, ["weights_n_bits", "17"]),
    ("weights_n_bits", "8", ["weights_n_bits", "integer"]),
    ("weights_per_channel_threshold", "true", ["weights_per_channel_threshold"]),
    ("enable_activation_quantization", 0, ["enable_activation_quantization"]),
    ("custom_tpc_opset_to_layer", [1], ["custom_tpc_opset_to_layer", "dict"]),
    ("custom_tpc_opset_to_layer", {"Conv": [1]}, ["custom_tpc_opset_to_layer", "Conv"]),
    ("custom_tpc_opset_to_layer", {"Conv": ([],)}, ["custom_tpc_opset_to_layer", "non-empty"]),
    ("custom_tpc_opset_to_layer", {"Conv": ([int], [1])}, ["custom_tpc_opset_to_layer", "attribute mapping"]),
    ("custom_tpc_opset_to_layer", {1: ([int],)}, ["custom_tpc_opset_to_layer", "not a str"]),
])
def test_quantization_config_rules(field, value, words):
    _refused(lambda: QuantizationConfig(**{field: value}), *words)
    qc = QuantizationConfig()
    _refused(lambda: setattr(qc, field, value), *words)  # assignment is validated too


def test_quantization_config_valid_edge_values_and_assignment():
    qc = QuantizationConfig(z_threshold=math.inf, shift_negative_ratio=0, l_p_value=1, weights_n_bits=16,
                            activation_n_bits=2)
    qc.z_threshold = 3
    assert qc.z_threshold == 3.0
    qc.weights_n_bits = None  # back to "take it from the TPC"
    assert "weights_n_bits" not in qc.tpc_overrides()


def test_unknown_argument_suggests_name():
    _refused(lambda: QuantizationConfig(z_treshold=2), "z_treshold", "z_threshold")
    qc = QuantizationConfig()
    with pytest.raises(ValueError):
        qc.not_a_field = 1


def test_custom_tpc_opset_to_layer_shapes_kept():
    class Layer:
        pass

    class CustomOpsetLayers(tuple):  # stand-in for the TPC's NamedTuple
        pass

    mapping = {"Input": ([Layer],), "Conv": ([Layer], {KERNEL_ATTR: DefaultDict(default_value="weight")}),
               "Linear": CustomOpsetLayers(([Layer], None))}
    qc = QuantizationConfig(custom_tpc_opset_to_layer=mapping)
    assert qc.custom_tpc_opset_to_layer["Linear"] is mapping["Linear"]


def test_config_copy_and_equality():
    qc = QuantizationConfig(weights_n_bits=4)
    assert copy.deepcopy(qc) == qc
    assert qc != QuantizationConfig()


# ---------------------------------------------------------------- Mixed precision

def test_mp_enums():
    assert [m.name for m in MpDistanceWeighting] == ["AVG", "LAST_LAYER", "EXP", "HESSIAN"]
    assert [(m.name, m.value) for m in MpMetricNormalization] == [("MAXBIT", "MAXBIT"), ("MINBIT", "MINBIT"),
                                                                  ("NONE", "NONE")]


def test_mp_defaults():
    mp = MixedPrecisionQuantizationConfig()
    assert mp.compute_distance_fn is None and mp.custom_metric_fn is None
    assert mp.distance_weighting_method is MpDistanceWeighting.AVG
    assert (mp.num_of_images, mp.configuration_overwrite, mp.num_interest_points_factor) == (32, None, 1.0)
    assert (mp.use_hessian_based_scores, mp.norm_scores, mp.refine_mp_solution) == (False, True, True)
    assert (mp.metric_normalization_threshold, mp.hessian_batch_size) == (1e10, 32)
    assert mp.metric_normalization is MpMetricNormalization.NONE
    assert (mp.metric_epsilon, mp.exp_distance_weighting_sigma) == (1e-6, 0.1)
    assert not mp.is_mixed_precision_enabled
    mp.set_mixed_precision_enable()
    assert mp.is_mixed_precision_enabled


def test_mp_distance_weighting_resolution():
    assert MixedPrecisionQuantizationConfig(use_hessian_based_scores=True).distance_weighting_method \
        is MpDistanceWeighting.HESSIAN
    assert MixedPrecisionQuantizationConfig(custom_metric_fn=lambda m: 0.0).distance_weighting_method is None
    assert MixedPrecisionQuantizationConfig(distance_weighting_method=MpDistanceWeighting.EXP) \
        .distance_weighting_method is MpDistanceWeighting.EXP
    assert MixedPrecisionQuantizationConfig(distance_weighting_method=4,
                                            use_hessian_based_scores=True).distance_weighting_method \
        is MpDistanceWeighting.HESSIAN
    _refused(lambda: MixedPrecisionQuantizationConfig(distance_weighting_method=MpDistanceWeighting.EXP,
                                                      use_hessian_based_scores=True),
             "distance_weighting_method", "use_hessian_based_scores")
    mp = MixedPrecisionQuantizationConfig()
    _refused(lambda: setattr(mp, "use_hessian_based_scores", True), "use_hessian_based_scores")
    mp.distance_weighting_method = MpDistanceWeighting.HESSIAN
    mp.use_hessian_based_scores = True
    assert mp.use_hessian_based_scores


@pytest.mark.parametrize("field, value, words", [
    ("num_of_images", 0, ["num_of_images", ">= 1"]),
    ("num_of_images", 2.0, ["num_of_images", "integer"]),
    ("num_interest_points_factor", 0, ["num_interest_points_factor", "> 0 and <= 1"]),
    ("num_interest_points_factor", 1.01, ["num_interest_points_factor"]),
    ("compute_distance_fn", "mse", ["compute_distance_fn", "callable"]),
    ("custom_metric_fn", 3, ["custom_metric_fn", "callable"]),
    ("configuration_overwrite", 3, ["configuration_overwrite", "list"]),
    ("configuration_overwrite", [0, -1], ["configuration_overwrite", ">= 0"]),
    ("configuration_overwrite", [0, 1.5], ["configuration_overwrite", "integer"]),
    ("hessian_batch_size", 0, ["hessian_batch_size", ">= 1"]),
    ("metric_normalization_threshold", 0, ["metric_normalization_threshold", "> 0"]),
    ("metric_normalization", "MAX", ["metric_normalization", "MpMetricNormalization"]),
    ("metric_epsilon", -1e-3, ["metric_epsilon", ">= 0"]),
    ("exp_distance_weighting_sigma", 0, ["exp_distance_weighting_sigma", "> 0"]),
    ("distance_weighting_method", "AVG", ["distance_weighting_method", "MpDistanceWeighting"]),
    ("use_hessian_based_scores", 1, ["use_hessian_based_scores", "True or False"]),
])
def test_mp_rules(field, value, words):
    _refused(lambda: MixedPrecisionQuantizationConfig(**{field: value}), *words)


def test_mp_accepts_values_and_positional():
    mp = MixedPrecisionQuantizationConfig(None, None, 8, (0, 1, 2), metric_normalization="MAXBIT",
                                          metric_epsilon=None)
    assert mp.num_of_images == 8 and mp.configuration_overwrite == [0, 1, 2]
    assert mp.metric_normalization is MpMetricNormalization.MAXBIT and mp.metric_epsilon is None


# ---------------------------------------------------------------- ResourceUtilization

def test_resource_utilization_defaults_and_targets():
    ru = ResourceUtilization()
    assert (ru.weights_memory, ru.activation_memory, ru.total_memory, ru.bops) == (math.inf,) * 4
    assert not ru.is_any_restricted() and ru.get_restricted_targets() == set()
    ru2 = ResourceUtilization(weights_memory=1000, bops=5e6)
    assert ru2.is_any_restricted()
    assert ru2.get_restricted_targets() == {RUTarget.WEIGHTS, RUTarget.BOPS}
    assert ru2.weight_restricted() and ru2.bops_restricted()
    assert not ru2.activation_restricted() and not ru2.total_mem_restricted()
    assert ru2.get_resource_utilization_dict(restricted_only=True) == {RUTarget.WEIGHTS: 1000, RUTarget.BOPS: 5e6}
    assert ResourceUtilization(100).weights_memory == 100  # positional, MCT order


def test_resource_utilization_is_satisfied_by():
    target = ResourceUtilization(weights_memory=1000, activation_memory=500)
    assert target.is_satisfied_by(ResourceUtilization(1000, 500, 1500, 1e9))
    assert target.is_satisfied_by(ResourceUtilization(10, 5, 0, 0))
    assert not target.is_satisfied_by(ResourceUtilization(1001, 5))
    assert not target.is_satisfied_by(ResourceUtilization(10, 501))
    assert ResourceUtilization().is_satisfied_by(ResourceUtilization(1e30, 1e30, 1e30, 1e30))
    assert not ResourceUtilization(bops=1).is_satisfied_by(ResourceUtilization())  # inf figure vs finite target
    _refused(lambda: target.is_satisfied_by({"weights_memory": 1}), "ResourceUtilization")


def test_resource_utilization_validation_repr_equality():
    _refused(lambda: ResourceUtilization(weights_memory=-1), "weights_memory", ">= 0")
    _refused(lambda: ResourceUtilization(bops=float("nan")), "bops", "NaN")
    _refused(lambda: ResourceUtilization(total_memory="1kB"), "total_memory", "number")
    ru = ResourceUtilization(weights_memory=2048)
    _refused(lambda: setattr(ru, "activation_memory", -5), "activation_memory")
    assert repr(ru) == "ResourceUtilization(weights_memory=2048, activation_memory=inf, total_memory=inf, bops=inf)"
    assert ru.get_summary_str(restricted=True) == "Weights memory: 2048"
    assert ru == ResourceUtilization(weights_memory=2048.0) and ru != ResourceUtilization()


# ---------------------------------------------------------------- BitWidthConfig

def test_bit_width_config_broadcasts_single_values():
    bw = BitWidthConfig()
    f1, f2 = NodeNameFilter("conv1"), NodeTypeFilter(int)
    bw.set_manual_activation_bit_width([f1, f2], 4)
    assert bw.manual_activation_bit_width_selection_list == [ManualBitWidthSelection(f1, 4),
                                                             ManualBitWidthSelection(f2, 4)]
    bw.set_manual_activation_bit_width(f1, [8])
    assert bw.manual_activation_bit_width_selection_list[-1] == ManualBitWidthSelection(f1, 8)
    bw.set_manual_weights_bit_width([f1, f2], [2, 4], KERNEL_ATTR)
    assert bw.manual_weights_bit_width_selection_list == [
        ManualWeightsBitWidthSelection(f1, 2, KERNEL_ATTR), ManualWeightsBitWidthSelection(f2, 4, KERNEL_ATTR)]
    bw.set_manual_weights_bit_width(f1, 16, [BIAS_ATTR])
    bw.set_manual_weights_bit_width((f1, f2), 8, [KERNEL_ATTR, 1])  # a positional weight by index
    assert [s.attr for s in bw.manual_weights_bit_width_selection_list[-2:]] == [KERNEL_ATTR, 1]


def test_bit_width_config_mismatch_and_bad_values():
    bw = BitWidthConfig()
    f1, f2 = NodeNameFilter("a"), NodeNameFilter("b")
    _refused(lambda: bw.set_manual_activation_bit_width([f1, f2], [4, 8, 2]), "3 bit_widths", "2 filters")
    _refused(lambda: bw.set_manual_weights_bit_width([f1, f2], 4, ["k", "b", "c"]), "3 attrs", "2 filters")
    _refused(lambda: bw.set_manual_activation_bit_width(f1, 32), "bit_width", "32", "float")
    _refused(lambda: bw.set_manual_activation_bit_width(f1, 1), "bit_width", "from 2 to 16")
    _refused(lambda: bw.set_manual_activation_bit_width(f1, 4.0), "bit_width", "4.0")
    _refused(lambda: bw.set_manual_activation_bit_width(None, 4), "filters", "None")
    _refused(lambda: bw.set_manual_activation_bit_width([], 4), "filters", "empty")
    _refused(lambda: bw.set_manual_activation_bit_width("conv1", 4), "filter", "conv1")
    _refused(lambda: bw.set_manual_weights_bit_width(f1, 4, ""), "attr")
    _refused(lambda: bw.set_manual_weights_bit_width(f1, 4, None), "attr")
    # nothing half-added by a refused call
    _refused(lambda: bw.set_manual_activation_bit_width([f1, f2], [4, 99]), "99")
    assert bw.manual_activation_bit_width_selection_list == []
    assert bw.manual_weights_bit_width_selection_list == []


# ---------------------------------------------------------------- Debug / Core / UserInformation / DefaultDict

def test_debug_config():
    dc = DebugConfig()
    assert (dc.analyze_similarity, dc.network_editor, dc.simulate_scheduler, dc.bypass) == (False, [], False, False)
    assert DebugConfig().network_editor is not DebugConfig().network_editor  # no shared mutable default
    rule = EditRule(NodeNameFilter("x"), ChangeCandidatesWeightsQuantConfigAttr(weights_n_bits=4))
    assert DebugConfig(network_editor=[rule]).network_editor == [rule]
    _refused(lambda: DebugConfig(network_editor=[("f", "a")]), "network_editor", "EditRule")
    _refused(lambda: DebugConfig(network_editor=rule.filter), "network_editor", "list")
    _refused(lambda: DebugConfig(bypass="no"), "bypass")


def test_core_config_defaults_and_mixed_precision_flag():
    cc = CoreConfig()
    assert isinstance(cc.quantization_config, QuantizationConfig)
    assert isinstance(cc.mixed_precision_config, MixedPrecisionQuantizationConfig)
    assert isinstance(cc.bit_width_config, BitWidthConfig) and isinstance(cc.debug_config, DebugConfig)
    assert not cc.is_mixed_precision_enabled
    qc, mp, bw = QuantizationConfig(weights_n_bits=4), MixedPrecisionQuantizationConfig(), BitWidthConfig()
    cc2 = CoreConfig(quantization_config=qc, mixed_precision_config=mp, bit_width_config=bw)
    assert cc2.quantization_config is qc and cc2.mixed_precision_config is mp and cc2.bit_width_config is bw
    assert cc2.is_mixed_precision_enabled
    assert CoreConfig(qc, mp).is_mixed_precision_enabled  # positional
    cc.mixed_precision_config = MixedPrecisionQuantizationConfig()
    assert cc.is_mixed_precision_enabled
    cc.mixed_precision_config = None
    assert not cc.is_mixed_precision_enabled and cc.mixed_precision_config is not None
    cc.mixed_precision_config.set_mixed_precision_enable()
    assert cc.is_mixed_precision_enabled
    _refused(lambda: CoreConfig(quantization_config=mp), "quantization_config", "QuantizationConfig")
    _refused(lambda: CoreConfig(debug_config={}), "debug_config")


def test_user_information():
    ui = UserInformation()
    assert (ui.input_scale, ui.gptq_info_dict, ui.mixed_precision_cfg, ui.final_resource_utilization) == \
        (1, {}, None, None)
    assert UserInformation().gptq_info_dict is not ui.gptq_info_dict
    ui.set_mixed_precision_cfg([0, 1])
    ui.set_final_resource_utilization(ResourceUtilization(weights_memory=10))
    ui.gptq_info_dict["loss"] = [1.0]
    r = repr(ui)
    assert "mixed_precision_cfg=[0, 1]" in r and "weights_memory=10" in r and "loss" in r


def test_default_dict():
    d = DefaultDict({int: (3, 2)}, default_value=(None, None))
    assert d.get(int) == (3, 2) and d.get(float) == (None, None)
    assert list(d.keys()) == [int] and int in d and float not in d
    assert DefaultDict().get("x") is None
    _refused(lambda: DefaultDict([1, 2]), "known_dict", "dict")
