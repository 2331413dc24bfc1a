"""What code written for MCT's quantized PyTorch models reads back: mct-quantizers classes, MCT's
names, the quantizers' attributes (issue 16, part 1)."""
import mct_quantizers as mctq
import numpy as np
import pytest
import torch
from mct_quantizers.pytorch import quantizers as mctq_quantizers
from torch import nn

import hwquant as mct

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.relu(self.dw(x))
        return self.fc(x.mean((2, 3)))


def _net():
    m = Net().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


DATA = [torch.randn(8, 3, 16, 16) for _ in range(3)]


def _gen():
    return iter([[d] for d in DATA])


@pytest.fixture(scope="module")
def quantized():
    q, _ = mct.ptq.pytorch_post_training_quantization(_net(), _gen)
    return q


def test_the_model_is_built_from_mct_quantizers_classes(quantized):
    wrappers = {n: m for n, m in quantized.named_modules() if isinstance(m, mctq.PytorchQuantizationWrapper)}
    holders = {n: m for n, m in quantized.named_modules() if isinstance(m, mctq.PytorchActivationQuantizationHolder)}
    assert set(wrappers) == {"conv_bn", "dw", "fc"}  # MCT names a layer with a folded batch-norm <layer>_bn
    assert all(isinstance(h.activation_holder_quantizer, mctq_quantizers.ActivationPOTInferableQuantizer)
               for h in holders.values())
    for w in wrappers.values():
        assert isinstance(w.weights_quantizers, dict) and set(w.weights_quantizers) == {"weight"}
        assert isinstance(w.weights_quantizers.get("weight"), mctq_quantizers.WeightsSymmetricInferableQuantizer)
        assert isinstance(w.weight, nn.Parameter)  # the float weight is the wrapper's, as in mct-quantizers
        assert [name for name, _, _ in w.get_weights_vars()] == ["weight"]


def test_holders_have_mcts_names_and_mapping(quantized):
    mapping = quantized.node_to_activation_quantization_holder
    assert mapping and all(v == f"{k}_activation_holder_quantizer" for k, v in mapping.items())
    for _node, holder in mapping.items():
        assert isinstance(getattr(quantized, holder), mctq.PytorchActivationQuantizationHolder)
    assert "x" in mapping and "fc" in mapping  # the input and the output


def test_quantizer_attributes_read_as_in_mct_quantizers(quantized):
    x_q = quantized.x_activation_holder_quantizer.activation_holder_quantizer
    assert x_q.num_bits == 8 and x_q.signed is True
    t = float(np.asarray(x_q.threshold_np).reshape(-1)[0])
    assert t == x_q.params["threshold"] and np.log2(t) == round(np.log2(t))
    assert mct.QuantizationMethod.POWER_OF_TWO in x_q.quantization_method  # mct-quantizers' enum, equal to ours
    assert x_q.quantization_method[0] == mctq.QuantizationMethod.POWER_OF_TWO
    kq = quantized.conv_bn.weights_quantizers["weight"]
    assert kq.per_channel and kq.channel_axis == 0 and kq.num_bits == 8
    assert np.asarray(kq.threshold_np).shape == (8,)
    np.testing.assert_allclose(np.asarray(kq.threshold_np), kq.params["threshold"])


def test_weights_read_back_quantized(quantized):
    w = quantized.conv_bn
    q_weight = w.get_quantized_weights()["weight"]
    assert torch.equal(q_weight, w.weights_quantizers["weight"](w.weight))
    assert not torch.equal(q_weight, w.weight)
    with torch.no_grad():
        quantized(DATA[0])
    # as mct-quantizers does, a call leaves the quantized weights in the layer
    assert torch.equal(w.layer.weight, q_weight)


def test_uniform_quantizers_expose_their_range():
    tpc = mct.get_target_platform_capabilities("pytorch", "tflite")
    q, _ = mct.ptq.pytorch_post_training_quantization(_net(), _gen, target_platform_capabilities=tpc)
    holder = q.x_activation_holder_quantizer.activation_holder_quantizer
    assert isinstance(holder, mctq_quantizers.ActivationUniformInferableQuantizer)
    lo, hi = float(holder.min_range), float(holder.max_range)
    assert lo < 0 < hi
    assert lo == pytest.approx(holder.params["range_min"], rel=1e-6) and hi == pytest.approx(holder.params["range_max"], rel=1e-6)


def test_collapsed_layers_have_mcts_names():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x) + x

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(4, 6, 3, padding=1), nn.Conv2d(6, 4, 1)

        def forward(self, x):
            return self.b(self.a(x))

    data = lambda: iter([[torch.randn(4, 4, 8, 8)] for _ in range(2)])  # noqa: E731
    qc = mct.core.CoreConfig(mct.core.QuantizationConfig(residual_collapsing=True, linear_collapsing=True))
    q, _ = mct.ptq.pytorch_post_training_quantization(Residual().eval(), data, core_config=qc)
    assert hasattr(q, "conv_add_collapsed")
    q, _ = mct.ptq.pytorch_post_training_quantization(Chain().eval(), data, core_config=qc)
    assert hasattr(q, "a_b_collapsed")


def test_saved_and_loaded_model_keeps_the_reads(quantized, tmp_path):
    path = mct.save_quantized_model(quantized, tmp_path / "m.pt") if hasattr(mct, "save_quantized_model") else None
    if path is None:
        from hwquant.torch.deployment.saved_model import load_quantized_model, save_quantized_model
        path = save_quantized_model(quantized, tmp_path / "m.pt")
    else:
        from hwquant.torch.deployment.saved_model import load_quantized_model
    loaded = load_quantized_model(path)
    assert loaded.node_to_activation_quantization_holder == quantized.node_to_activation_quantization_holder
    assert isinstance(loaded.conv_bn, mctq.PytorchQuantizationWrapper)
    with torch.no_grad():
        assert torch.equal(loaded(DATA[1]), quantized(DATA[1]))
