"""The bias-correction decisions are the framework-free core's: the same model (the same weights) with the same
data and settings makes the same decisions on PyTorch and on Keras, after PTQ (kept or undone, judged on the
representative data) and after GPTQ (the measured or the analytic correction, judged on held-back samples)."""
import numpy as np
import pytest
from backend_kit import kits, make_kit

import hwquant as mct

pytestmark = pytest.mark.skipif(set(kits()) != {"torch", "keras"}, reason="needs both PyTorch and Keras")

IN_SHAPE = (3, 10, 10)
MODELS = {
    "conv-bn-relu": [("conv", 8, 3, False), ("bn",), ("relu",), ("conv", 8, 3), ("relu",), ("conv", 4, 1)],
    "depthwise": [("conv", 8, 3), ("relu",), ("dwconv", 3), ("relu",), ("conv", 6, 1), ("relu",), ("conv", 4, 3)],
}


def _same_weights(torch_model, keras_model) -> None:
    """The Keras layers get the PyTorch layers' weights, in Keras' layouts (both built from the same specs)."""
    import keras
    from torch import nn

    torch_layers = [m for m in torch_model.modules() if isinstance(m, (nn.Conv2d, nn.Linear, nn.BatchNorm2d))]
    keras_layers = [la for la in keras_model.layers if la.get_weights()]
    assert len(torch_layers) == len(keras_layers)
    for t, k in zip(torch_layers, keras_layers):
        if isinstance(t, nn.BatchNorm2d):
            k.set_weights([p.detach().numpy() for p in (t.weight, t.bias, t.running_mean, t.running_var)])
            k.epsilon = t.eps
            continue
        w = t.weight.detach().numpy()
        if isinstance(k, keras.layers.DepthwiseConv2D):
            w = w.transpose(2, 3, 0, 1)  # (C, 1, kh, kw) -> (kh, kw, C, 1)
        elif w.ndim == 4:
            w = w.transpose(2, 3, 1, 0)  # (out, in, kh, kw) -> (kh, kw, in, out)
        else:
            w = w.T
        k.set_weights([w] + ([t.bias.detach().numpy()] if t.bias is not None else []))


def _both(specs):
    import torch

    torch.manual_seed(0)
    t, k = make_kit("torch"), make_kit("keras")
    tm, km = t.model(IN_SHAPE, specs), k.model(IN_SHAPE, specs)
    _same_weights(tm, km)
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((16,) + IN_SHAPE).astype(np.float32) * 1.5 + 0.3 for _ in range(4)]
    x = batches[0][:4]
    np.testing.assert_allclose(k.run(km, k.tensor(x)), np.moveaxis(t.run(tm, t.tensor(x)), 1, -1), atol=1e-4)
    return (t, tm, [[t.tensor(b)] for b in batches]), (k, km, [[k.tensor(b)] for b in batches])


def _metadata(kit, model):
    if kit.name == "keras":
        return model.hwquant_metadata
    from hwquant.torch.deployment.metadata import read_metadata
    return read_metadata(model)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("bits", [3, 8])
def test_ptq_keeps_or_undoes_bias_correction_alike(name, bits):
    decisions = []
    for kit, model, batches in _both(MODELS[name]):
        cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=bits))
        q, _ = kit.ptq(model, batches, core_config=cc)
        decisions.append(_metadata(kit, q)["pipeline"]["bias_corrected"])
    assert decisions[0] == decisions[1]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("correct", [True, False])
def test_gptq_chooses_the_same_bias_correction(name, correct):
    results = []
    for kit, model, batches in _both(MODELS[name]):
        cfg = getattr(mct.gptq, f"get_{kit.facade_prefix}_gptq_config")(
            n_epochs=2, use_hessian_based_weights=False, use_hessian_sample_attention=False)
        cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=3, weights_bias_correction=correct))
        gptq = getattr(mct.gptq, f"{kit.facade_prefix}_gradient_post_training_quantization")
        if kit.name == "keras":
            _, info = gptq(model, kit.data_gen(batches), cfg, core_config=cc)
        else:
            _, info = gptq(model, kit.data_gen(batches), core_config=cc, gptq_config=cfg)
        results.append(info.gptq_info_dict)
    torch_run, keras_run = results
    assert torch_run["bias_correction"] == keras_run["bias_correction"]
    assert len(torch_run["trained_layers"]) == len(keras_run["trained_layers"])
    assert len(torch_run["bias_corrected"]) == len(keras_run["bias_corrected"]) == \
        (len(torch_run["trained_layers"]) if correct else 0)
    if correct:  # both candidates judged alike: the output errors agree to training noise
        for which in ("measured", "analytic"):
            a, b = torch_run["output_error"][which], keras_run["output_error"][which]
            assert abs(a - b) < 0.25 * max(a, b), (which, a, b)
