"""Resource figures and mixed-precision semantics checked against MCT 2.6.1 on the same small net
(figures obtained by running MCT 2.6.1 side by side, .venv-mct, on this model and data)."""
import math

import pytest
import torch
from torch import nn

import hwquant as mct

RU = mct.core.ResourceUtilization


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.conv3 = nn.Conv2d(8, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x)) + x
        x = torch.relu(self.conv3(x))
        return self.fc(x.mean((2, 3)))


def _setup():
    torch.manual_seed(0)
    model = Small().eval()
    torch.manual_seed(0)
    data = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    return model, lambda: iter([[x] for x in data])


# MCT 2.6.1's pytorch_resource_utilization_data on Small, IMX500 1.0 and 4.0 alike: 8-bit kernels
# only (576 weights; float biases do not count), 8-bit activations (the base configs, not the 16-bit
# candidates of 4.0), BOPs = MACs x 8 x 8.
MCT_RU = dict(weights_memory=576, activation_memory=1536, total_memory=2112, bops=1714176)


@pytest.mark.parametrize("version", ["1.0", "4.0"])
def test_resource_utilization_data_is_mcts(version):
    model, gen = _setup()
    ru = mct.core.pytorch_resource_utilization_data(model, gen, target_platform_capabilities=
                                                    mct.get_target_platform_capabilities(version, "imx500"))
    assert {k: getattr(ru, k) for k in MCT_RU} == MCT_RU


@pytest.mark.parametrize("version", ["1.0", "4.0"])
def test_weights_target_as_mct_meets_and_reports_it(version):
    model, gen = _setup()
    tpc = mct.get_target_platform_capabilities(version, "imx500")
    q, info = mct.ptq.pytorch_post_training_quantization(
        model, gen, target_resource_utilization=RU(weights_memory=576 * 0.75), target_platform_capabilities=tpc)
    final = info.final_resource_utilization
    # MCT: weights 432.0, the unconstrained figures left unset (inf)
    assert final.weights_memory == 432
    assert math.isinf(final.activation_memory) and math.isinf(final.total_memory) and math.isinf(final.bops)
    kernels = {n: w.weights_quantizers["weight"].num_bits for n, w in q.named_modules() if hasattr(w, "weights_quantizers")}
    assert kernels == {"conv1_bn": 8, "conv2": 8, "conv3": 4, "fc": 4}  # MCT's choice
    # a weights-only target leaves the activations at their base 8 bits (MCT), even where 16 are offered
    bits = {h.activation_holder_quantizer.num_bits for h in q.modules() if hasattr(h, "activation_holder_quantizer")}
    assert bits == {8}


def test_no_target_reports_no_figures():
    model, gen = _setup()
    _, info = mct.ptq.pytorch_post_training_quantization(model, gen)
    assert info.final_resource_utilization is None  # as MCT's UserInformation


def test_activation_target_keeps_kernels_at_their_base_bits():
    model, gen = _setup()
    tpc = mct.get_target_platform_capabilities("4.0", "imx500")
    # 16-bit activations offered: a target between 8 and 16 bits everywhere
    q, info = mct.ptq.pytorch_post_training_quantization(
        model, gen, target_resource_utilization=RU(activation_memory=1536 * 1.5), target_platform_capabilities=tpc)
    kernels = {w.weights_quantizers["weight"].num_bits for w in q.modules() if hasattr(w, "weights_quantizers")}
    assert kernels == {8}
    assert info.final_resource_utilization.activation_memory <= 1536 * 1.5
    assert math.isinf(info.final_resource_utilization.weights_memory)


# MCT 2.6.1 with edge-mdt-tpc 1.3.0's IMX500 1.0 LUT TPC on Small: the same figures, and at 75 / 50 /
# 30 % of the weights memory these kernels (LUT = WeightsLUTSymmetricInferableQuantizer).
MCT_LUT_CHOICE = {0.75: (432, {"conv1_bn": 8, "conv2": 8, "conv3": 4, "fc": 4}),
                  0.5: (288, {"conv1_bn": 4, "conv2": 4, "conv3": 4, "fc": 4}),
                  0.3: (162, {"conv1_bn": 2, "conv2": 4, "conv3": 2, "fc": 2})}


@pytest.mark.parametrize("fraction", sorted(MCT_LUT_CHOICE))
def test_lut_tpc_mixed_precision_as_mct(fraction):
    from mct_quantizers.pytorch.quantizers import WeightsLUTSymmetricInferableQuantizer, WeightsSymmetricInferableQuantizer
    model, gen = _setup()
    tpc = mct.get_target_platform_capabilities("1.0", "imx500", extended_version="lut")
    q, info = mct.ptq.pytorch_post_training_quantization(
        model, gen, target_resource_utilization=RU(weights_memory=576 * fraction), target_platform_capabilities=tpc)
    memory, bits = MCT_LUT_CHOICE[fraction]
    assert info.final_resource_utilization.weights_memory == memory
    quantizers = {n: w.weights_quantizers["weight"] for n, w in q.named_modules() if hasattr(w, "weights_quantizers")}
    assert {n: k.num_bits for n, k in quantizers.items()} == bits
    for k in quantizers.values():
        lut = isinstance(k, WeightsLUTSymmetricInferableQuantizer)
        assert lut == (k.num_bits < 8) and lut != isinstance(k, WeightsSymmetricInferableQuantizer)
        if lut:  # at most 2**bits distinct values per channel
            assert len(k.lut_values) <= 2 ** k.num_bits
    x = next(gen())[0]
    assert torch.isfinite(q(x)).all()
