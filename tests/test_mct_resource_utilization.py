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


# ---- MCT's search semantics on a TPC with both sides configurable (the rules MCT's own mixed-precision
# tests check: a target the largest candidates meet takes them; an activation no restricted figure
# counts ends at its largest bits; a target on a boundary is met exactly, not exceeded).
def _mp_tpc():
    from hwquant.constants import BIAS_ATTR, KERNEL_ATTR
    from hwquant.target_platform_capabilities import (AttributeQuantizationConfig, OperatorSetNames, OperatorsSet,
                                                      OpQuantizationConfig, QuantizationConfigOptions, Signedness,
                                                      TargetPlatformCapabilities)
    M = mct.QuantizationMethod
    kernel = AttributeQuantizationConfig(weights_quantization_method=M.POWER_OF_TWO, weights_n_bits=8,
                                         weights_per_channel_threshold=True, enable_weights_quantization=True)
    op = OpQuantizationConfig(default_weight_attr_config=kernel.clone_and_edit(enable_weights_quantization=False),
                              attr_weights_configs_mapping={}, activation_quantization_method=M.POWER_OF_TWO,
                              activation_n_bits=8, supported_input_activation_n_bits=(16, 8, 4, 2),
                              enable_activation_quantization=True, quantization_preserving=False, fixed_scale=None,
                              fixed_zero_point=None, simd_size=32, signedness=Signedness.AUTO)
    with_kernel = op.clone_and_edit(attr_weights_configs_mapping={KERNEL_ATTR: kernel, BIAS_ATTR: AttributeQuantizationConfig()})
    options = [with_kernel.clone_and_edit(activation_n_bits=a, attr_to_edit={KERNEL_ATTR: {"weights_n_bits": w}})
               for a in (8, 16) for w in (8, 4, 2)]
    mp = QuantizationConfigOptions(quantization_configurations=tuple(options), base_config=options[0])
    return TargetPlatformCapabilities(
        default_qco=QuantizationConfigOptions(quantization_configurations=(op,)), tpc_platform_type="test",
        operator_set=tuple(OperatorsSet(name=n, qc_options=mp) for n in (OperatorSetNames.CONV,
                                                                         OperatorSetNames.FULLY_CONNECTED)))


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.fc = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 16, 3), nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(x.mean((2, 3)))


def _bops_run(bops):
    torch.manual_seed(0)
    model = Plain().eval()
    data = [torch.randn(4, 3, 12, 12) for _ in range(2)]
    q, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[x] for x in data]),
                                                         target_resource_utilization=RU(bops=bops),
                                                         target_platform_capabilities=_mp_tpc())
    kernels = {n: w.weights_quantizers["weight"].num_bits for n, w in q.named_modules() if hasattr(w, "weights_quantizers")}
    holders = {n.replace("_activation_holder_quantizer", ""): h.activation_holder_quantizer.num_bits
               for n, h in q.named_modules() if hasattr(h, "activation_holder_quantizer")}
    return kernels, holders, info.final_resource_utilization.bops


def test_bops_target_mct_semantics():
    # BOPs = MACs x kernel bits x input bits; the layers' inputs are 8-bit ReLU / model inputs, so the
    # kernels' own output bits count nowhere: they go to 16 whatever the target
    kernels, holders, top = _bops_run(1e12)
    assert kernels == {"conv1": 8, "conv2": 8, "fc": 8} and holders["conv1"] == holders["conv2"] == 16
    kernels, holders, at_max = _bops_run(top)
    assert at_max == top and set(kernels.values()) == {8}  # the largest candidates meet it: taken
    kernels, holders, below = _bops_run(top - 1)  # one bit-operation less: a kernel steps down, just
    assert below <= top - 1 and min(kernels.values()) < 8 and holders["conv1"] == holders["conv2"] == 16
    boundary = below  # a boundary reached exactly is met exactly (the solver's tolerance is checked)
    kernels2, _, figure = _bops_run(boundary)
    assert figure <= boundary


class WithFlatten(nn.Module):
    """conv -> ReLU -> flatten -> linear: the flatten is unquantized in IMX500 1.0, quantization-preserving
    in 4.0 (disabled and preserving, as MCT's TPCs mark it)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


# MCT 2.6.1 on WithFlatten (same seeds): 1.0 counts the input (192) and the ReLU output (256) around the
# fused conv, not the unquantized flatten, and the linear layer's input is float (32-bit BOPs); 4.0's
# preserving flatten takes the ReLU's 8 bits (256 + 256; 8-bit BOPs). hwquant counted the flatten at
# 32 bits (1280 bytes on both), which left an activation-memory target nothing to choose on
# PP-OCRv4's recogniser (its peak was a float flatten).
MCT_RU_FLATTEN = {"1.0": dict(activation_memory=448, bops=1097728), "4.0": dict(activation_memory=512, bops=606208)}


@pytest.mark.parametrize("version", ["1.0", "4.0"])
def test_activation_memory_counts_quantized_and_preserving_tensors_as_mct(version):
    torch.manual_seed(0)
    model = WithFlatten().eval()
    torch.manual_seed(0)
    data = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    ru = mct.core.pytorch_resource_utilization_data(model, lambda: iter([[x] for x in data]),
                                                    target_platform_capabilities=mct.get_target_platform_capabilities(
                                                        tpc_version=version, device_type="imx500"))
    assert {k: getattr(ru, k) for k in MCT_RU_FLATTEN[version]} == MCT_RU_FLATTEN[version]
    assert ru.weights_memory == 2668
