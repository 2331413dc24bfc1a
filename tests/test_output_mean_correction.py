"""The measured (empirical) bias correction GPTQ ends with, and the builder's handling of in-place
operations when it exposes intermediate tensors."""
import copy

import numpy as np
import pytest
import torch
from torch import nn

import hwquant as mct
from hwquant.torch.builder import FakeQuantizers, QuantizerFactory, build_module
from hwquant.torch.facade import DEFAULT_PYTORCH_TPC, run_pytorch_ptq
from hwquant.core.passes.output_mean_correction import NodeStream, correct_output_means
from hwquant.gptq.training import correct_biases


def channel_axis(node):
    return -1 if isinstance(node.call_target, nn.Linear) else 1


def channel_mean(t, axis):
    t = t.detach().double()
    return t.movedim(axis, 0).reshape(t.shape[axis], -1).mean(1)


def _numpy(means):
    return {k: v.numpy() for k, v in means.items()}


class Net(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1, bias=bias)
        self.act = nn.ReLU(inplace=True)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.act(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.mean((2, 3)))


def _ptq_state(model, batches, **qc):
    qc = {"weights_n_bits": 3, "weights_bias_correction": False, **qc}
    session, state = run_pytorch_ptq(model.eval(), lambda: iter([[b] for b in batches]), None,
                                     mct.core.CoreConfig(mct.core.QuantizationConfig(**qc)), DEFAULT_PYTORCH_TPC)
    return session.adapter, state.graph


def _means(graph, names, x, quantized):
    model = build_module(graph, QuantizerFactory() if quantized else None, extra_outputs=names,
                         extra_outputs_unquantized=True).eval()
    with torch.no_grad():
        points = model(x)[1]
    return {n: channel_mean(p, channel_axis(graph.node(n))) for n, p in zip(names, points)}


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(16, 3, 12, 12, generator=g) + 0.5 for _ in range(4)]


@pytest.mark.parametrize("bias", [True, False])
def test_quantized_layers_get_the_float_output_means(data, bias):
    torch.manual_seed(0)
    adapter, graph = _ptq_state(Net(bias), data)
    names = ["c1", "c2", "fc"]
    x = torch.cat(data)
    float_means = _means(graph, names, x, quantized=False)
    before = _means(graph, names, x, quantized=True)
    assert correct_output_means(graph, adapter, _numpy(float_means), [x], 16) == names
    assert "bias" in graph.node("c1").weights  # a layer without a bias gets one
    after = _means(graph, names, x, quantized=True)
    for n in names:
        err_before = (before[n] - float_means[n]).abs().max().item()
        err_after = (after[n] - float_means[n]).abs().max().item()
        # exact up to the integer kernels' bias grid (input scale x kernel scale)
        assert err_before > 1e-3 and err_after < 0.05 * err_before, (n, err_before, err_after)


def test_correction_is_measured_at_the_observed_node(data):
    """Observed after the ReLU, which passes only part of a bias shift (the share of positive inputs):
    a second, secant step brings the mean there close to the float one."""
    torch.manual_seed(0)
    adapter, graph = _ptq_state(Net(), data)
    x = torch.cat(data)
    float_means = _means(graph, ["act"], x, quantized=False)["act"]
    before = (_means(graph, ["act"], x, quantized=True)["act"] - float_means).abs().mean()
    correct_output_means(graph, adapter, {"c1": float_means.numpy()}, [x], 16, observed={"c1": "act"})
    after = (_means(graph, ["act"], x, quantized=True)["act"] - float_means).abs().mean()
    assert after < 0.1 * before, (before, after)


def test_stream_measures_as_the_whole_model_and_keeps_only_live_values(data):
    torch.manual_seed(0)
    adapter, graph = _ptq_state(Net(), data)
    model = build_module(graph, FakeQuantizers(), extra_outputs=["c1", "fc"], extra_outputs_unquantized=True).eval()
    stream = NodeStream(graph, adapter.node_runner(graph), [[b] for b in data])
    with torch.no_grad():
        full = [model(b)[1] for b in data]
    want = [torch.stack([channel_mean(f[k], channel_axis(graph.node(name))) for f in full]).mean(0).numpy()
            for k, name in enumerate(["c1", "fc"])]
    stream.advance_to("c1")
    np.testing.assert_allclose(stream.probe("c1", "c1"), want[0], rtol=1e-6, atol=1e-7)
    stream.advance_to("fc")
    np.testing.assert_allclose(stream.probe("fc", "fc"), want[1], rtol=1e-6, atol=1e-7)
    for env in stream.envs:  # the probe kept nothing; of what came before fc, only fc's input is live
        assert list(env) == graph.node("fc").inputs


def test_observed_tensors_survive_in_place_operations(data):
    """``self.act`` is ReLU(inplace=True): exposing c1's output must not let the ReLU overwrite it."""
    torch.manual_seed(0)
    _, graph = _ptq_state(Net(), data)
    model = build_module(graph, None, extra_outputs=["c1"])
    with torch.no_grad():
        c1 = model(data[0])[1][0]
    assert (c1 < 0).any()
    plain = build_module(graph, None)  # capture made the graph functional: nothing runs in place
    assert not any(getattr(m, "inplace", False) for m in plain.modules())


def test_gptq_without_bias_correction_leaves_the_learned_biases(data):
    torch.manual_seed(0)
    gen = lambda: iter([[b] for b in data])  # noqa: E731
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=1)
    for flag, expect in ((True, ["c1", "c2", "fc"]), (False, [])):
        cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=4, weights_bias_correction=flag))
        _, info = mct.gptq.pytorch_gradient_post_training_quantization(Net().eval(), gen, core_config=cc,
                                                                       gptq_config=cfg)
        d = info.gptq_info_dict
        assert d["bias_corrected"] == expect
        if flag:  # the correction kept is the one with the smaller output error on held-back samples
            assert d["bias_correction"] == min(d["output_error"], key=d["output_error"].get)
        assert np.isfinite(info.gptq_info_dict["losses"]).all()


def test_built_models_do_not_share_the_graphs_weights(data):
    """Training a built model in place (GPTQ's biases) must leave the graph, and so the float teacher
    built from it, alone."""
    torch.manual_seed(0)
    _, graph = _ptq_state(Net(), data)
    before = graph.node("c1").weights["bias"].copy()
    model = build_module(graph, None)
    with torch.no_grad():
        model.get_submodule("c1").bias.add_(1.0)
    assert np.array_equal(graph.node("c1").weights["bias"], before)


class _Backend:
    """What the bias-correction choice reads of a GPTQ back end: the adapter, the float model and its points."""

    def __init__(self, adapter, graph, points):
        self.adapter, self.float_model = adapter, build_module(graph, None).eval()
        self.teacher = build_module(graph, None, extra_outputs=points).eval()

    def teacher_points(self, x):
        with torch.no_grad():
            return self.teacher(*x)[1]


def _judged_by_identity(adapter, graph, graph_wins):
    """The candidates' output errors decided by which graph they are built from."""
    adapter.fake_quantized_model = lambda g: g
    adapter.relative_output_errors = lambda ref, models, data, n: [
        (0.0 if (m is graph) == graph_wins else 1.0) for m in models]


@pytest.mark.parametrize("winner", ["analytic", "measured"])
def test_gptq_keeps_the_correction_with_the_smaller_output_error(data, winner):
    torch.manual_seed(0)
    adapter, graph = _ptq_state(Net(), data)
    layers = ["c1", "c2", "fc"]
    kernels = {n: graph.node(n).weights["weight"].copy() for n in layers}

    def analytic(g, _kernels):  # a recognisable correction
        for n in layers:
            g.node(n).set_weight("bias", np.full_like(g.node(n).weights["bias"], 7.0))
        return len(layers)

    backend = _Backend(adapter, graph, layers)
    _judged_by_identity(adapter, graph, graph_wins=winner == "measured")  # the analytic graph is the copy
    out = correct_biases(graph, backend, kernels, analytic, layers, {n: n for n in layers}, [torch.cat(data)], 16)
    assert out["bias_correction"] == winner
    sevens = all(np.all(graph.node(n).weights["bias"] == 7.0) for n in layers)
    assert sevens == (winner == "analytic")


def test_a_layer_without_bias_is_refitted_from_zero(data):
    """A winning measured correction is fitted again on all samples from the trained biases: a layer
    that had none starts from zero, not from the half-data fit (observed after its ReLU, where the
    secant step makes the result depend on the start)."""
    torch.manual_seed(0)
    adapter, graph = _ptq_state(Net(bias=False), data)
    layers, point_of = ["c1", "c2", "fc"], {"c1": "act", "c2": "c2", "fc": "fc"}
    assert "bias" not in graph.node("c1").weights
    kernels = {n: graph.node(n).weights["weight"].copy() for n in layers}
    backend = _Backend(adapter, graph, list(point_of.values()))
    x = [torch.cat(data)]
    expected = copy.deepcopy(graph)
    points = backend.teacher_points(x)
    means = {n: channel_mean(p, channel_axis(graph.node(n))).numpy() for n, p in zip(layers, points)}
    correct_output_means(expected, adapter, means, x, 16, observed=point_of)
    _judged_by_identity(adapter, graph, graph_wins=True)  # measured wins
    correct_biases(graph, backend, kernels, lambda g, k: 0, layers, point_of, x, 16)
    for n in layers:
        np.testing.assert_allclose(graph.node(n).weights["bias"], expected.node(n).weights["bias"], rtol=1e-5, atol=1e-6)
