"""Mixed precision: the resource model agrees with the resource figures, the integer program finds
the brute-force optimum, targets are met (weights, activation, several at once), unreachable
targets name their minimum, generous ones change nothing, and the user's overrides hold."""
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hwquant as mct
from hwquant.core.configuration.config import RUTarget
from hwquant.core.mixed_precision.resources import ResourceModel
from hwquant.core.mixed_precision.search import minimum, refine, search
from hwquant.core.pipeline.stages import prepare
from hwquant.core.pipeline.resource_utilization import compute_resource_utilization, final_config
from hwquant.errors import InvalidConfigError
from hwquant.torch.deployment.export_model import quantizers_of
from hwquant.torch.session import start_session

RU = mct.core.ResourceUtilization


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.pw = nn.Conv2d(16, 32, 1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        y = self.stem(x)
        y = self.pw(self.dw(y) + y)
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


def _model():
    torch.manual_seed(0)
    return Net().eval()


DATA = [[torch.randn(16, 3, 12, 12, generator=torch.Generator().manual_seed(i))] for i in range(4)]


def gen():
    return iter(DATA)


def _tpc(version="1.0"):
    return mct.get_target_platform_capabilities(version, "imx500")


def _ru_data(version="1.0"):
    """The model's figures at its largest candidates: what MCT users take targets as fractions of."""
    return mct.core.pytorch_resource_utilization_data(_model(), gen, target_platform_capabilities=_tpc(version))


def _quantize(target=None, version="1.0", core_config=None):
    return mct.ptq.pytorch_post_training_quantization(_model(), gen, target_resource_utilization=target,
                                                      core_config=core_config or mct.core.CoreConfig(),
                                                      target_platform_capabilities=_tpc(version))


def _prepared(version):
    session = start_session(_model(), gen, mct.core.CoreConfig(), _tpc(version))
    prepare(session.state)
    configurable = [n for n in session.graph if len(n.candidates) > 1]
    adapter = session.adapter
    return session.graph, configurable, ResourceModel(session.graph, configurable, adapter.kernel_axes,
                                                      adapter.kernel_attr), adapter


@pytest.fixture(scope="module")
def max_ru():
    return mct.core.pytorch_resource_utilization_data(_model(), gen, target_platform_capabilities=_tpc("4.0"))


def test_resource_model_agrees_with_the_resource_figures():
    graph, configurable, model, adapter = _prepared("4.0")
    assert len(configurable) == 7 and any(len(n.candidates) == 6 for n in configurable)
    for node in graph:
        node.final_config = node.candidates[0] if node.candidates else None
    for choice in itertools.islice(itertools.product(*[range(len(n.candidates)) for n in configurable]), 0, None, 37):
        for node, c in zip(configurable, choice):
            node.final_config = node.candidates[c]
        ru = compute_resource_utilization(graph, final_config, adapter)
        figures = model.figures(list(choice))
        assert figures[RUTarget.WEIGHTS] == pytest.approx(ru.weights_memory)
        assert figures[RUTarget.ACTIVATION] == pytest.approx(ru.activation_memory)
        assert figures[RUTarget.TOTAL] == pytest.approx(ru.total_memory)
        assert figures[RUTarget.BOPS] == pytest.approx(ru.bops)


def test_integer_program_finds_the_brute_force_optimum():
    _, configurable, model, _ = _prepared("4.0")
    gen_ = torch.Generator().manual_seed(1)
    sensitivity = [torch.rand(len(n.candidates), generator=gen_).tolist() for n in configurable]
    choices = list(itertools.product(*[range(len(n.candidates)) for n in configurable]))
    for target, fraction in ((RUTarget.WEIGHTS, 0.6), (RUTarget.ACTIVATION, 0.7), (RUTarget.BOPS, 0.5)):
        values = [model.value(target, list(c)) for c in choices]
        limit = min(values) + fraction * (max(values) - min(values))
        best = min(sum(sensitivity[i][k] for i, k in enumerate(c)) for c, v in zip(choices, values) if v <= limit)
        found = search(model, sensitivity, {target: limit})
        assert model.value(target, found) <= limit + 1e-6
        assert sum(sensitivity[i][k] for i, k in enumerate(found)) == pytest.approx(best)
        assert minimum(model, target)[0] == pytest.approx(min(values))
        refined = refine(model, found, sensitivity, {target: limit})
        assert model.value(target, refined) <= limit + 1e-6


@pytest.mark.parametrize("fraction", [0.75, 0.5])
def test_weights_memory_target(fraction):
    full = _ru_data().weights_memory
    q, info = _quantize(RU(weights_memory=full * fraction))
    assert info.final_resource_utilization.weights_memory <= full * fraction
    assert info.mixed_precision_cfg is not None and len(info.mixed_precision_cfg) == 4
    assert any(bits[1]["weight"] < 8 for bits in info.mixed_precision_bit_widths.values())
    kernels = {n: m.weights_quantizers["weight"].num_bits for n, m in q.named_modules() if hasattr(m, "weights_quantizers")}
    assert sorted(kernels.values()) == sorted(b[1]["weight"] for b in info.mixed_precision_bit_widths.values())
    x = torch.randn(32, 3, 12, 12)
    with torch.no_grad():
        f, y = _model()(x), q(x)
    assert 10 * math.log10((f ** 2).sum() / ((f - y) ** 2).sum()) > (8 if fraction > 0.6 else 3)


def _tpc_with_4_bit_activation_options():
    """IMX500 1.0 whose quantized operator sets also offer 4-bit activations."""
    tpc, sets = _tpc("1.0"), []
    for opset in tpc.operator_set:
        options = opset.qc_options or tpc.default_qco
        if options.quantization_configurations[0].enable_activation_quantization:
            cfgs = tuple(options.quantization_configurations)
            cfgs += tuple(c.clone_and_edit(activation_n_bits=4) for c in cfgs)
            base = options.base_config or cfgs[0]
            options = options.model_copy(update={"quantization_configurations": cfgs, "base_config": base})
            opset = opset.model_copy(update={"qc_options": options})
        sets.append(opset)
    return tpc.model_copy(update={"operator_set": tuple(sets)})


def test_activation_memory_and_combined_targets():
    tpc = _tpc_with_4_bit_activation_options()
    run = lambda target: mct.ptq.pytorch_post_training_quantization(  # noqa: E731
        _model(), gen, target_resource_utilization=target, target_platform_capabilities=tpc)
    low = mct.core.pytorch_resource_utilization_data(_model(), gen, target_platform_capabilities=tpc)
    target = RU(activation_memory=low.activation_memory * 0.8)
    q, info = run(target)
    assert info.final_resource_utilization.activation_memory <= target.activation_memory
    assert any(bits[0] == 4 for bits in info.mixed_precision_bit_widths.values())
    both = RU(weights_memory=low.weights_memory * 0.6, activation_memory=low.activation_memory * 0.8)
    _, info2 = run(both)
    ru = info2.final_resource_utilization
    assert ru.weights_memory <= both.weights_memory and ru.activation_memory <= both.activation_memory


def test_target_above_the_maximum_takes_the_largest_candidates(max_ru):
    # MCT's rule: no search, every node at its largest candidate (here the base configs: kernels at 8 bits)
    q, info = _quantize(RU(weights_memory=max_ru.weights_memory * 2, bops=max_ru.bops * 2))
    plain, _ = _quantize()
    assert info.mixed_precision_cfg == [0, 0, 0, 0]
    x = torch.randn(4, 3, 12, 12)
    assert torch.equal(q(x), plain(x))


def test_unreachable_targets_name_their_minimum():
    with pytest.raises(InvalidConfigError, match=r"weights_memory=10 bytes \(smallest reachable: \d+"):
        _quantize(RU(weights_memory=10))
    with pytest.raises(InvalidConfigError, match=r"activation_memory=5 bytes \(smallest reachable: \d+.*bops"):
        _quantize(RU(activation_memory=5, bops=1e12))


@pytest.mark.parametrize("field", ["weights_memory", "activation_memory", "total_memory", "bops"])
@pytest.mark.parametrize("tpc", ["imx500", "4-bit activations", "tflite"])
def test_a_target_far_below_every_choice_is_refused(field, tpc):
    """(activation_memory=10 was accepted and PTQ ran: with IMX500's options no layer has an activation
    bit-width choice, and nothing checked a target when nothing was left to choose)"""
    tpc = {"imx500": _tpc(), "4-bit activations": _tpc_with_4_bit_activation_options(),
           "tflite": mct.get_target_platform_capabilities("1.0", "tflite")}[tpc]
    with pytest.raises(InvalidConfigError, match=rf"{field}=10 \S+ \(smallest reachable: [\d.e+]+\)"):
        mct.ptq.pytorch_post_training_quantization(_model(), gen, RU(**{field: 10}), target_platform_capabilities=tpc)


def test_a_fixed_figure_is_checked_but_a_target_it_meets_runs():
    """With no bit-width choice the figure is fixed: a target it meets runs (nothing to search), one below
    it says so, with the figure as the smallest reachable."""
    tflite = mct.get_target_platform_capabilities("1.0", "tflite")
    fixed = mct.core.pytorch_resource_utilization_data(_model(), gen, target_platform_capabilities=tflite)
    _, info = mct.ptq.pytorch_post_training_quantization(
        _model(), gen, RU(activation_memory=fixed.activation_memory), target_platform_capabilities=tflite)
    assert info.final_resource_utilization.activation_memory == fixed.activation_memory
    with pytest.raises(InvalidConfigError, match=rf"no layer a choice of bit widths.*activation_memory="
                                                 rf"{fixed.activation_memory - 1:.6g} bytes \(smallest reachable: "
                                                 rf"{fixed.activation_memory:.6g}\)"):
        mct.ptq.pytorch_post_training_quantization(
            _model(), gen, RU(activation_memory=fixed.activation_memory - 1), target_platform_capabilities=tflite)


def test_configuration_overwrite_and_its_errors():
    full = _ru_data().weights_memory
    mp = mct.core.MixedPrecisionQuantizationConfig(configuration_overwrite=[2, 2, 1, 0])
    _, info = _quantize(RU(weights_memory=full * 0.9), core_config=mct.core.CoreConfig(mixed_precision_config=mp))
    assert info.mixed_precision_cfg == [2, 2, 1, 0]
    assert [b[1]["weight"] for b in info.mixed_precision_bit_widths.values()] == [2, 2, 4, 8]
    for bad, match in (([0, 1], "has 2 entries but the model has 4"), ([0, 0, 0, 7], "out of range")):
        mp = mct.core.MixedPrecisionQuantizationConfig(configuration_overwrite=bad)
        with pytest.raises(InvalidConfigError, match=match):
            _quantize(RU(weights_memory=full * 0.9), core_config=mct.core.CoreConfig(mixed_precision_config=mp))


def test_manual_bit_width_is_respected():
    full = _ru_data().weights_memory
    bw = mct.core.BitWidthConfig()
    bw.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter("head"), 8, "kernel_attr")
    q, info = _quantize(RU(weights_memory=full * 0.65), core_config=mct.core.CoreConfig(bit_width_config=bw))
    assert q.head.weights_quantizers["weight"].num_bits == 8
    assert info.final_resource_utilization.weights_memory <= full * 0.65
    assert info.unmatched_bit_widths == []


def test_a_manual_bit_width_that_matches_no_node_is_said(caplog):
    full = _ru_data().weights_memory
    bw = mct.core.BitWidthConfig()
    bw.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter("head"), 8, "kernel_attr")
    bw.set_manual_activation_bit_width(mct.core.network_editor.NodeNameFilter("mul_4"), 16)
    with pytest.warns(UserWarning, match=r"1 selection\(s\) of the BitWidthConfig matched no node"), \
            caplog.at_level("WARNING", logger="hwquant"):
        q, info = _quantize(RU(weights_memory=full * 0.65), core_config=mct.core.CoreConfig(bit_width_config=bw))
    assert info.unmatched_bit_widths == ["activation 16 bits: NodeNameFilter('mul_4')"]
    assert "NodeNameFilter('mul_4')" in caplog.text
    assert q.head.weights_quantizers["weight"].num_bits == 8  # the selection that matched still holds


def _calibrated(version="1.0"):
    session = start_session(_model(), gen, mct.core.CoreConfig(), _tpc(version))
    run_ptq_stages(session)
    return session.graph, [n for n in session.graph if len(n.candidates) > 1]


def run_ptq_stages(session):
    from hwquant.core.pipeline import candidates as cand
    from hwquant.core.pipeline.stages import calibrate, compute_parameters
    prepare(session.state)
    calibrate(session.state, session.data)
    cand.select_base_configs(session.graph)
    compute_parameters(session.state, all_candidates=True)


def test_measured_sensitivity_equals_a_full_run_of_each_configuration():
    from hwquant.core.mixed_precision.measurement import candidate_sensitivity
    from hwquant.core.pipeline.resource_utilization import max_bits_config
    from hwquant.torch.builder import QuantizerFactory, build_module
    from hwquant.torch.mixed_precision import TorchSensitivityBackend

    graph, configurable = _calibrated()
    distance = lambda a, b: ((a - b) ** 2).flatten(1).mean(1)  # noqa: E731
    mp = mct.core.MixedPrecisionQuantizationConfig(compute_distance_fn=distance, num_of_images=16,
                                                   metric_epsilon=None)
    scores = candidate_sensitivity(graph, configurable, gen(), mp, TorchSensitivityBackend("cpu"))
    points = [n.name for n in configurable if n.name not in graph.output_names()]
    x = DATA[0][0]
    float_model = build_module(graph, None, extra_outputs=points).eval()
    with torch.no_grad():
        f_out, f_points = float_model(x)
    for i, node in enumerate(configurable):
        for c, cand in enumerate(node.candidates):
            for other in configurable:
                other.final_config = max_bits_config(other)
            node.final_config = cand
            with torch.no_grad():
                q_out, q_points = build_module(graph, QuantizerFactory(), extra_outputs=points).eval()(x)
            ipts = sum(float(distance(a, b).mean()) for a, b in zip(f_points, q_points)) / len(points)
            expected = ipts + float(distance(f_out, q_out).mean())
            assert scores[i][c] == pytest.approx(expected, rel=1e-4, abs=1e-9)
        assert scores[i][0] < scores[i][1] < scores[i][2]  # 8 < 4 < 2 bits


def test_probe_estimate_ranks_candidates_like_the_measurement():
    from hwquant.core.mixed_precision.measurement import candidate_sensitivity
    from hwquant.torch.mixed_precision import TorchSensitivityBackend

    graph, configurable = _calibrated()
    probed = candidate_sensitivity(graph, configurable, gen(), mct.core.MixedPrecisionQuantizationConfig(),
                                   TorchSensitivityBackend("cpu"))
    measured = candidate_sensitivity(graph, configurable, gen(), mct.core.MixedPrecisionQuantizationConfig(
        distance_weighting_method=mct.core.MpDistanceWeighting.EXP, exp_distance_weighting_sigma=1e-3),
        TorchSensitivityBackend("cpu"))
    for p_row, m_row in zip(probed, measured):
        assert np.argsort(p_row).tolist() == np.argsort(m_row).tolist() == [0, 1, 2]
    # the 2-bit candidates: both ways agree on which layers suffer most (Spearman correlation)
    p2, m2 = [r[2] for r in probed], [r[2] for r in measured]
    assert np.corrcoef(np.argsort(np.argsort(p2)), np.argsort(np.argsort(m2)))[0, 1] > 0.5


def test_custom_metric_fn_sees_each_configuration():
    calls = []

    def metric(model):
        calls.append(sorted(m.num_bits for m in quantizers_of(model).values() if m.target == "weights"))
        return float(sum(32 - b for b in calls[-1]))  # fewer bits, larger metric

    target = RU(weights_memory=_ru_data().weights_memory * 0.7)
    mp = mct.core.MixedPrecisionQuantizationConfig(custom_metric_fn=metric)
    _, info = _quantize(target, core_config=mct.core.CoreConfig(mixed_precision_config=mp))
    assert len(calls) == 12  # 4 configurable nodes x 3 candidates, one configuration each
    assert [2, 8, 8, 8] in calls and [8, 8, 8, 8] in calls
    assert info.final_resource_utilization.weights_memory <= target.weights_memory


@pytest.mark.parametrize("method", ["AVG", "LAST_LAYER", "HESSIAN", "EXP"])
def test_distance_weightings_meet_the_target(method):
    target = RU(weights_memory=_ru_data().weights_memory * 0.6)
    mp = mct.core.MixedPrecisionQuantizationConfig(distance_weighting_method=getattr(mct.core.MpDistanceWeighting, method),
                                                   num_of_images=8)
    _, info = _quantize(target, core_config=mct.core.CoreConfig(mixed_precision_config=mp))
    assert info.final_resource_utilization.weights_memory <= target.weights_memory


def test_lookup_table_kernels_as_candidates(tmp_path):
    """A TPC whose convolution / FC options include 4- and 2-bit lookup-table kernels (k-means tables,
    power-of-two and symmetric thresholds): the search may pick them, and the model runs and exports."""
    from hwquant.constants import KERNEL_ATTR
    QM = mct.QuantizationMethod
    tpc, sets = _tpc("1.0"), []
    for opset in tpc.operator_set:
        options = opset.qc_options
        if options is not None and len(options.quantization_configurations) > 1:
            base = options.base_config
            luts = tuple(base.clone_and_edit(attr_to_edit={KERNEL_ATTR: {"weights_quantization_method": m,
                                                                         "weights_n_bits": b}})
                         for m in (QM.LUT_POT_QUANTIZER, QM.LUT_SYM_QUANTIZER) for b in (4, 2))
            options = mct.target_platform_capabilities.QuantizationConfigOptions(
                quantization_configurations=(base,) + luts, base_config=base)
            opset = opset.model_copy(update={"qc_options": options})
        sets.append(opset)
    lut_tpc = tpc.model_copy(update={"operator_set": tuple(sets)})
    target = RU(weights_memory=_ru_data().weights_memory * 0.6)
    q, info = mct.ptq.pytorch_post_training_quantization(_model(), gen, target_resource_utilization=target,
                                                         target_platform_capabilities=lut_tpc)
    assert info.final_resource_utilization.weights_memory <= target.weights_memory
    methods = {m.method for m in quantizers_of(q).values() if m.target == "weights"}
    assert methods & {QM.LUT_POT_QUANTIZER, QM.LUT_SYM_QUANTIZER}
    x = torch.randn(8, 3, 12, 12)
    with torch.no_grad():
        f, y = _model()(x), q(x)
    assert 10 * math.log10((f ** 2).sum() / ((f - y) ** 2).sum()) > 5
    path = mct.exporter.pytorch_export_model(q, tmp_path / "m.onnx", gen,
                                             quantization_format=mct.exporter.QuantizationFormat.MCTQ)
    sess = mct.exporter.mctq_inference_session(path)
    out = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    step = q.head_activation_holder_quantizer.activation_holder_quantizer.scale.item()
    assert (np.abs(out - y.numpy()) <= step * 1.0001).mean() >= 0.95  # float kernels here (LUT): a few flips
