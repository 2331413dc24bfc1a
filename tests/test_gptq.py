"""GPTQ: the rounding quantizers, schedules, losses, Hessian scores, and the whole run (fidelity against
PTQ, what the returned model is, log_function, options and the error paths)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from small_nets import seeded_net  # tests/small_nets.py
from torch import nn

import hwquant as mct
from hwquant.core.numerics import quant_math
from hwquant.errors import InvalidConfigError
from hwquant.gptq.schedules import linear_annealing, regularization_beta
from hwquant.torch.gptq.backend import (GradualActivationQuantizer, activation_hessian_scores, multiple_tensors_mse_loss,
                                        sample_layer_attention_loss)
from hwquant.torch.gptq.quantizers import (BasePytorchGPTQTrainableQuantizer, STESymmetricGPTQ, STEUniformGPTQ,
                                           SymmetricSoftRoundingGPTQ, UniformSoftRoundingGPTQ)
from hwquant.torch.deployment.metadata import read_metadata
from hwquant.torch.quantizers import PytorchQuantizationWrapper
from hwquant.tpc.enums import QuantizationMethod as QM
from hwquant.trainable_infrastructure import QuantizationTarget, VariableGroup, get_trainable_quantizer_class

sys.path.insert(0, str(Path(__file__).parent))
from test_trainable_quantizers import wcfg  # noqa: E402

GPTQ = mct.gptq.pytorch_gradient_post_training_quantization
RT = mct.gptq.RoundingType


# ------------------------------------------------------------------------------------------ quantizers
def weights(seed=0):
    return torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(seed)) * 1.5


CASES = [(SymmetricSoftRoundingGPTQ, QM.SYMMETRIC), (SymmetricSoftRoundingGPTQ, QM.POWER_OF_TWO),
         (UniformSoftRoundingGPTQ, QM.UNIFORM), (STESymmetricGPTQ, QM.SYMMETRIC), (STEUniformGPTQ, QM.UNIFORM)]


@pytest.mark.parametrize("rounding,method,cls", [
    (RT.SoftQuantizer, QM.POWER_OF_TWO, SymmetricSoftRoundingGPTQ), (RT.SoftQuantizer, QM.SYMMETRIC, SymmetricSoftRoundingGPTQ),
    (RT.SoftQuantizer, QM.UNIFORM, UniformSoftRoundingGPTQ), (RT.STE, QM.POWER_OF_TWO, STESymmetricGPTQ),
    (RT.STE, QM.UNIFORM, STEUniformGPTQ)])
def test_registry_finds_the_gptq_quantizers(rounding, method, cls):
    assert get_trainable_quantizer_class(QuantizationTarget.Weights, rounding, method,
                                         BasePytorchGPTQTrainableQuantizer) is cls
    with pytest.raises(InvalidConfigError, match="no trainable activation quantizer"):
        get_trainable_quantizer_class(QuantizationTarget.Activation, rounding, method, BasePytorchGPTQTrainableQuantizer)


@pytest.mark.parametrize("cls,method", CASES)
def test_hard_rounding_starts_at_nearest_and_stays_on_the_grid(cls, method):
    w = weights()
    q = cls(wcfg(method))
    q.init_rounding(w)
    inferable = q.convert_to_inferable_quantizers()
    hard = q.quantized_weights(w)
    assert torch.equal(hard, inferable(w))  # starts at PTQ's rounding to nearest
    assert torch.equal(inferable(hard), hard)  # on the grid: the quantized model reproduces it
    assert q.training  # quantized_weights leaves the mode alone


@pytest.mark.parametrize("method", [QM.SYMMETRIC, QM.UNIFORM])
def test_soft_rounding_starts_at_the_clipped_float_weights(method):
    w = weights()
    q = (SymmetricSoftRoundingGPTQ if method != QM.UNIFORM else UniformSoftRoundingGPTQ)(wcfg(method))
    q.init_rounding(w)
    grid = q.grid()
    lo, hi = quant_math.grid_range(quant_math.AffineGrid(grid.scale.detach(), grid.zero_point.detach(), grid.qmin,
                                                         grid.qmax, grid.axis))
    shape = [-1, 1, 1]
    clipped = torch.maximum(torch.minimum(w, torch.as_tensor(hi).float().reshape(shape)),
                            torch.as_tensor(lo).float().reshape(shape))
    torch.testing.assert_close(q(w), clipped, atol=1e-5, rtol=0)


def test_soft_rounding_regularizer_and_gradients():
    w = weights()
    q = SymmetricSoftRoundingGPTQ(wcfg(QM.SYMMETRIC))
    q.init_rounding(w)
    h = q.soft_targets().detach()
    torch.testing.assert_close(q.rounding_regularization(3.0), (1 - (2 * h - 1).abs() ** 3).sum())
    q(w).sum().backward()
    assert q.auxvar.grad is not None and q.auxvar.grad.abs().sum() > 0
    with torch.no_grad():
        q.auxvar.copy_(torch.where(h > 0.5, 10.0, -10.0))  # every h at 0 or 1
    assert float(q.rounding_regularization(2.0).detach()) == 0.0
    assert torch.equal(q.train()(w), q.quantized_weights(w))  # soft == hard once decided
    assert q.get_trainable_variables(VariableGroup.WEIGHTS) == [q.auxvar]
    assert q.get_trainable_variables(VariableGroup.QPARAMS) == []  # the PTQ threshold stays by default


def test_ste_rounding_moves_at_most_max_lsbs_change():
    w = weights()
    q = STESymmetricGPTQ(wcfg(QM.SYMMETRIC), max_lsbs_change=1)
    q.init_rounding(w)
    start = q.quantized_weights(w)
    q(w).sum().backward()
    assert q.auxvar.grad.abs().sum() > 0  # inside the bound the shift learns
    with torch.no_grad():
        q.auxvar.fill_(5.0)
    s = q.grid().scale.detach().reshape(-1, 1, 1)
    moved = (q.quantized_weights(w) - start) / s
    assert moved.max() <= 1 + 1e-5 and moved.max() >= 1 - 1e-5  # clipped at the range's end otherwise


def test_quantization_parameter_learning_trains_the_threshold():
    q = SymmetricSoftRoundingGPTQ(wcfg(QM.SYMMETRIC), quantization_parameter_learning=True)
    q.init_rounding(weights())
    assert q.get_trainable_variables(VariableGroup.QPARAMS) == [q.threshold]
    q(weights()).sum().backward()
    assert q.threshold.grad is not None


def test_gptq_quantizer_errors():
    with pytest.raises(InvalidConfigError, match="quantization_parameter_learning must be a bool"):
        SymmetricSoftRoundingGPTQ(wcfg(QM.SYMMETRIC), quantization_parameter_learning="yes")
    with pytest.raises(InvalidConfigError, match="max_lsbs_change"):
        STESymmetricGPTQ(wcfg(QM.SYMMETRIC), max_lsbs_change=0)
    q = SymmetricSoftRoundingGPTQ(wcfg(QM.SYMMETRIC))
    with pytest.raises(InvalidConfigError, match="call init_rounding"):
        q(weights())
    with pytest.raises(InvalidConfigError, match="3 per-channel parameters but the tensor has 4 channels"):
        q.init_rounding(torch.zeros(4, 2))


# ------------------------------------------------------------------------------ schedules, losses, Hessian
def test_linear_annealing_and_the_regularizer_temperature():
    f = linear_annealing(2, 6, 0.0, 1.0)
    assert [f(t) for t in range(8)] == [0, 0, 0, 0.25, 0.5, 0.75, 1, 1]
    beta = regularization_beta(100)
    assert beta(0) == beta(20) == 20 and beta(100) == 2 and beta(60) == pytest.approx(11)
    with pytest.raises(ValueError):
        linear_annealing(5, 2, 0, 1)


def test_gradual_activation_quantizer_blends():
    class Round(nn.Module):
        def forward(self, x):
            return torch.round(x)
    g = GradualActivationQuantizer(Round())
    x = torch.tensor([0.2, 1.7])
    g.q_fraction = 0.0
    assert torch.equal(g(x), x)
    g.q_fraction = 1.0
    assert torch.equal(g(x), torch.round(x))
    g.q_fraction = 0.5
    torch.testing.assert_close(g(x), 0.5 * x + 0.5 * torch.round(x))


def test_losses_match_their_definitions():
    g = torch.Generator().manual_seed(0)
    f = [torch.randn(4, 3, 5, 5, generator=g), torch.randn(4, 6, generator=g)]
    q = [t + 0.1 * torch.randn(t.shape, generator=g) for t in f]
    expected = np.mean([float(((a - b) ** 2).mean() / (b ** 2).mean()) for a, b in zip(q, f)])
    assert float(multiple_tensors_mse_loss(q, f)) == pytest.approx(expected, rel=1e-5)
    w = torch.tensor([2.0, 1.0])
    expected_w = np.mean([2.0 * float(((q[0] - f[0]) ** 2).mean() / (f[0] ** 2).mean()),
                          1.0 * float(((q[1] - f[1]) ** 2).mean() / (f[1] ** 2).mean())])
    assert float(multiple_tensors_mse_loss(q, f, loss_weights=w)) == pytest.approx(expected_w, rel=1e-5)
    sw = torch.rand(4, 2, generator=g)
    per_sample = [((q[0] - f[0]) ** 2).sum(1).flatten(1).mean(1), ((q[1] - f[1]) ** 2).sum(1)]
    expected_sla = sum(float((sw[:, i] * per_sample[i]).mean()) for i in range(2)) / float(sw.mean(0).max())
    assert float(sample_layer_attention_loss(q, f, None, None, None, None, sw)) == pytest.approx(expected_sla, rel=1e-5)
    with pytest.raises(ValueError, match="batch, 2 points"):
        sample_layer_attention_loss(q, f, None, None, None, None, torch.ones(2))


class _Linear(nn.Module):
    """out = A a with orthogonal rows: E||A^T v||^2 = ||A||_F^2 exactly for Rademacher v."""

    def __init__(self, a):
        super().__init__()
        self.a = a

    def forward(self, x):
        point = x * 2
        return point @ self.a.T, [point]


def test_hessian_scores_are_exact_on_a_linear_map():
    a = torch.diag(torch.tensor([1.0, 2.0, 3.0]))
    x = torch.randn(5, 3)
    scores = activation_hessian_scores(_Linear(a), [[x]], [-1], per_channel=False, iterations=3)
    np.testing.assert_allclose(scores, np.full((5, 1), 14.0), rtol=1e-5)
    per_channel = activation_hessian_scores(_Linear(a), [[x]], [-1], per_channel=True, iterations=3)
    np.testing.assert_allclose(per_channel, np.full((5, 1), 9.0), rtol=1e-5)  # the largest channel


# ------------------------------------------------------------------------------------------ the whole run
@pytest.fixture(scope="module")
def setup():
    model = seeded_net(channels=16, classes=10, pooled_head=True)
    g = torch.Generator().manual_seed(1)
    data = [torch.randn(32, 3, 16, 16, generator=g) for _ in range(8)]  # far more samples than a layer's weights
    held_out = torch.randn(128, 3, 16, 16, generator=g)
    return model, data, held_out


def gen_of(data):
    return lambda: iter([[d] for d in data])


W4 = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=4))


def run(setup, n_epochs=8, core_config=W4, **cfg_kw):
    model, data, _ = setup
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=n_epochs, **cfg_kw)
    return GPTQ(model, gen_of(data), core_config=core_config, gptq_config=cfg)


def error_db(model, quantized, x):
    with torch.no_grad():
        f, q = model(x), quantized(x)
    return 10 * np.log10(float((f ** 2).mean() / ((f - q) ** 2).mean()))


@pytest.fixture(scope="module")
def ptq_model(setup):
    model, data, _ = setup
    return mct.ptq.pytorch_post_training_quantization(model, gen_of(data), core_config=W4)[0]


@pytest.mark.parametrize("kw", [{}, {"use_hessian_sample_attention": False},
                                {"use_hessian_based_weights": False, "use_hessian_sample_attention": False}],
                         ids=["sample-layer-attention", "hessian-per-point", "no-hessian"])
def test_gptq_learns_the_rounding(setup, ptq_model, kw):
    # On this random network, bias correction already wins most of what can be won: GPTQ (learned
    # rounding, then its measured bias correction) must beat PTQ on held-out data, and clearly beat
    # rounding to nearest without the correction.
    model, data, held_out = setup
    quantized, info = run(setup, n_epochs=5, **kw)
    no_correction = mct.ptq.pytorch_post_training_quantization(
        model, gen_of(data), core_config=mct.core.CoreConfig(mct.core.QuantizationConfig(
            weights_n_bits=4, weights_bias_correction=False)))[0]
    gptq_db = error_db(model, quantized, held_out)
    assert gptq_db > error_db(model, ptq_model, held_out)
    assert gptq_db > error_db(model, no_correction, held_out) + 3.0
    d = info.gptq_info_dict
    assert d["steps"] == len(d["losses"]) == 5 * 8 and d["trained_layers"] == ["c1_bn", "c2", "fc"]
    assert d["interest_points"] == ["relu", "relu_1", "fc"]  # where c1 and c2 are quantized: after their ReLU
    assert d["teacher_cached"] and d["losses"][-1] < d["losses"][0]


def test_uncached_teacher_trains_the_same(setup, monkeypatch):
    """When the teacher's activations do not fit the cache budget, the teacher runs at every step:
    the same training, step for step."""
    from hwquant.gptq import training as core_training
    from hwquant.torch.adapter import PytorchAdapter
    from hwquant.torch.gptq.backend import TorchGPTQBackend
    assert TorchGPTQBackend(PytorchAdapter()).free_memory() > 0
    assert core_training.teacher_cache_budget(None) == core_training.TEACHER_CACHE_BYTES
    cached = run(setup, n_epochs=1, use_hessian_based_weights=False, use_hessian_sample_attention=False)[1]
    monkeypatch.setattr(core_training, "teacher_cache_budget", lambda free: 0)
    uncached = run(setup, n_epochs=1, use_hessian_based_weights=False, use_hessian_sample_attention=False)[1]
    assert cached.gptq_info_dict["teacher_cached"] and not uncached.gptq_info_dict["teacher_cached"]
    np.testing.assert_allclose(uncached.gptq_info_dict["losses"], cached.gptq_info_dict["losses"], rtol=1e-5)


def test_result_is_an_ordinary_quantized_model_on_the_ptq_grid(setup, ptq_model):
    model, data, held_out = setup
    quantized, _ = run(setup, n_epochs=3)
    assert read_metadata(quantized)["method"] == "gptq"
    changed = 0
    for (_name, w), (_, w_ptq) in zip(quantized.named_modules(), ptq_model.named_modules()):
        if isinstance(w, PytorchQuantizationWrapper):
            kernel, q = w.weight, w.weights_quantizers["weight"]
            assert torch.equal(q(kernel), kernel)  # learned weights lie on the grid
            assert q.params == w_ptq.weights_quantizers["weight"].params  # the PTQ grid
            changed += int(not torch.equal(kernel, w_ptq.weights_quantizers["weight"](w_ptq.weight)))
    assert changed >= 1
    with torch.no_grad():
        assert torch.isfinite(quantized(held_out)).all()


def test_no_gptq_config_is_post_training_quantization(setup, ptq_model):
    model, data, held_out = setup
    quantized, info = GPTQ(model, gen_of(data), core_config=W4)
    with torch.no_grad():
        assert torch.equal(quantized(held_out), ptq_model(held_out))
    assert info.gptq_info_dict == {}


def test_ste_rounding_and_frozen_biases(setup):
    # without bias training or bias correction, the biases stay the float model's (folded) biases
    model, data, held_out = setup
    cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=4, weights_bias_correction=False))
    ptq = mct.ptq.pytorch_post_training_quantization(model, gen_of(data), core_config=cc)[0]
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=5)
    cfg = cfg.model_copy(update={"rounding_type": RT.STE, "train_bias": False})
    quantized, info = GPTQ(model, gen_of(data), core_config=cc, gptq_config=cfg)
    assert info.gptq_info_dict["rounding_type"] == "STE"
    ptq_biases = {n: m.layer.bias for n, m in ptq.named_modules() if isinstance(m, PytorchQuantizationWrapper)}
    for n, m in quantized.named_modules():
        if isinstance(m, PytorchQuantizationWrapper):
            assert torch.equal(m.layer.bias, ptq_biases[n])
    assert error_db(model, quantized, held_out) > error_db(model, ptq, held_out)


def test_ste_and_soft_rounding_learn_different_kernels(setup, ptq_model):
    # STE: a bounded shift per weight, rounded straight through; SoftQuantizer: AdaRound's soft
    # rounding. Same data, same seed: each moves the PTQ rounding, and not the same way.
    import dataclasses
    model, data, held_out = setup
    base = mct.gptq.get_pytorch_gptq_config(n_epochs=4)
    kernels = {}
    for rt in (RT.STE, RT.SoftQuantizer):
        torch.manual_seed(0)
        q, info = GPTQ(model, gen_of(data), core_config=W4, gptq_config=dataclasses.replace(base, rounding_type=rt))
        assert info.gptq_info_dict["rounding_type"] == rt.name
        kernels[rt] = {n: m.get_quantized_weights()["weight"] for n, m in q.named_modules()
                       if isinstance(m, PytorchQuantizationWrapper)}
    ptq = {n: m.get_quantized_weights()["weight"] for n, m in ptq_model.named_modules()
           if isinstance(m, PytorchQuantizationWrapper)}
    ste_moves = 0
    for n, k in ptq.items():
        step = (ptq_model.get_submodule(n).weights_quantizers["weight"].scale).reshape(-1, *[1] * (k.dim() - 1))
        moved = ((kernels[RT.STE][n] - k).abs() / step).round()
        assert moved.max() <= 1  # max_lsbs_change: at most the neighbouring grid point
        ste_moves += int(moved.sum())
        assert not torch.equal(kernels[RT.STE][n], kernels[RT.SoftQuantizer][n]), n
    assert ste_moves > 0


def test_log_function_and_custom_loss_are_called(setup):
    calls, loss_args = [], []

    def log_function(loss, grads, params):
        calls.append((loss, len(grads), len(params), grads[0].shape == params[0].shape))

    def loss(q, f, qk, fk, means, stds, weights):
        loss_args.append((len(q), len(qk), len(fk), qk[0][0].shape == fk[0][0].shape))
        return multiple_tensors_mse_loss(q, f, loss_weights=weights)

    run(setup, n_epochs=1, log_function=log_function, loss=loss, use_hessian_sample_attention=False)
    assert len(calls) == 8 and all(isinstance(c[0], float) and c[1:] == (3, 3, True) for c in calls)
    assert loss_args == [(3, 3, 3, True)] * 8


def test_threshold_learning_updates_the_quantization_parameters(setup):
    model, data, _ = setup
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=2)
    cfg = cfg.model_copy(update={"gptq_quantizer_params_override": {"quantization_parameter_learning": True}})
    quantized, _ = GPTQ(model, gen_of(data), core_config=W4, gptq_config=cfg)
    for m in quantized.modules():
        if isinstance(m, PytorchQuantizationWrapper):
            kernel, q = m.weight, m.weights_quantizers["weight"]
            assert torch.equal(q(kernel), kernel)


def test_optimizer_given_as_a_class_and_the_config_left_alone(setup):
    opt = torch.optim.Adam([torch.zeros(0, requires_grad=True)], lr=1e-2)
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=1, optimizer=opt)
    cfg = cfg.model_copy(update={"optimizer_bias": torch.optim.SGD,  # a class, and a factory
                                 "optimizer_rest": lambda params: torch.optim.SGD(params, lr=1e-4)})
    model, data, _ = setup
    GPTQ(model, gen_of(data), core_config=W4, gptq_config=cfg)
    assert len(opt.param_groups[0]["params"]) == 1 and not opt.state  # the user's optimizer is untouched


def test_bad_inputs_are_refused(setup):
    model, data, _ = setup
    with pytest.raises(InvalidConfigError, match="gptq_config must be a GradientPTQConfig"):
        GPTQ(model, gen_of(data), gptq_config={"n_epochs": 1})
    with pytest.raises(InvalidConfigError, match="gptq_representative_data_gen"):
        GPTQ(model, gen_of(data), gptq_config=mct.gptq.get_pytorch_gptq_config(1), gptq_representative_data_gen=3)
    cfg = mct.gptq.get_pytorch_gptq_config(1).model_copy(update={"optimizer": "adam"})
    with pytest.raises(InvalidConfigError, match="optimizer must be a torch.optim.Optimizer"):
        GPTQ(model, gen_of(data), gptq_config=cfg)
    cfg = mct.gptq.get_pytorch_gptq_config(1).model_copy(update={"optimizer_bias": None, "optimizer_rest": None})
    with pytest.raises(InvalidConfigError, match="needs GradientPTQConfig.optimizer_rest"):
        GPTQ(model, gen_of(data), gptq_config=cfg)
    cfg = mct.gptq.get_pytorch_gptq_config(1).model_copy(update={"gptq_quantizer_params_override": {"lr": 1}})
    with pytest.raises(InvalidConfigError, match="does not take"):
        GPTQ(model, gen_of(data), gptq_config=cfg)


def test_a_model_without_quantized_kernels_is_refused():
    model = nn.Sequential(nn.ReLU(), nn.MaxPool2d(2)).eval()
    data = [torch.randn(4, 3, 8, 8)]
    with pytest.raises(InvalidConfigError, match="no quantized kernel"):
        GPTQ(model, gen_of(data), gptq_config=mct.gptq.get_pytorch_gptq_config(1))
