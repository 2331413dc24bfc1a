"""PyTorch post-training quantization end to end on small models: structure, fidelity, TPC
faithfulness, state dict, and every bad-input path."""
import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hwquant as mct
from hwquant.core.numerics import quant_math
from hwquant.errors import InvalidTPCError
from hwquant.torch.data import RepresentativeDataError
from hwquant.torch.quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper
from hwquant.tpc import OperatorsSet, TargetPlatformCapabilities


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = F.relu6(self.pw(F.relu(self.dw(y)))) + y
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def make_model():
    torch.manual_seed(0)
    model = SmallNet()
    with torch.no_grad():  # non-trivial batch-norm statistics
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval()


DATA = [torch.randn(8, 3, 12, 12, generator=torch.Generator().manual_seed(i)) for i in range(4)]


def gen():
    for d in DATA:
        yield [d]


def sqnr(a, b):
    return 10 * math.log10((a ** 2).sum().item() / ((a - b) ** 2).sum().item())


def quantize(model=None, **kw):
    return mct.ptq.pytorch_post_training_quantization(model or make_model(), gen, **kw)


def test_quantized_model_structure_and_fidelity():
    model = make_model()
    q, info = quantize(model)
    wrappers = {n for n, m in q.named_modules() if isinstance(m, PytorchQuantizationWrapper)}
    holders = {n for n, m in q.named_modules() if isinstance(m, PytorchActivationQuantizationHolder)}
    assert wrappers == {"conv_bn", "dw", "pw", "fc"}  # MCT names a layer with a folded batch-norm <layer>_bn
    # conv -> relu and dw -> relu, pw -> relu6 are fused (IMX500): no quantizer between them
    assert "conv_activation_holder_quantizer" not in holders and "dw_activation_holder_quantizer" not in holders
    assert {"x_activation_holder_quantizer", "relu_activation_holder_quantizer", "relu6_activation_holder_quantizer",
            "fc_activation_holder_quantizer"} <= holders
    x = torch.randn(32, 3, 12, 12)
    with torch.no_grad():
        assert sqnr(model(x), q(x)) > 20
    assert info.final_resource_utilization is None  # as in MCT: reported for the targets given, and none was
    assert "PytorchQuantizationWrapper" in repr(q) and "POWER_OF_TWO, 8 bits" in repr(q)


def test_user_model_is_not_modified():
    model = make_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quantize(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training


def test_outputs_lie_on_the_activation_grid_and_kernels_on_the_weight_grid():
    q, _ = quantize()
    holder = q.fc_activation_holder_quantizer.activation_holder_quantizer
    out = q(torch.randn(4, 3, 12, 12)).detach().numpy()
    grid = quant_math.grid_values(holder.grid(), dtype=np.float32)
    assert np.isin(out, grid).all()
    # power-of-two thresholds (IMX500 activations)
    for m in q.modules():
        if isinstance(m, PytorchActivationQuantizationHolder):
            t = m.activation_holder_quantizer.params["threshold"]
            assert math.log2(t) == round(math.log2(t))
    pw = q.pw
    wq = pw.weights_quantizers["weight"](pw.weight).detach().numpy()
    scale = pw.weights_quantizers["weight"].scale.numpy().reshape(-1, 1, 1, 1)
    assert np.allclose(wq / scale, np.round(wq / scale), atol=1e-3)


def test_state_dict_round_trip_and_device():
    q, _ = quantize()
    q2, _ = quantize()
    with torch.no_grad():
        for p in q2.parameters():
            p.add_(1.0)  # make it different, then restore it from the first model's state dict
    q2.load_state_dict(q.state_dict())
    x = torch.randn(4, 3, 12, 12)
    assert torch.equal(q(x), q2(x))
    buffers = dict(q.named_buffers())
    assert any(k.endswith("threshold") or k.endswith("scale") for k in buffers)
    assert next(q.parameters()).device.type == "cpu"


@pytest.mark.parametrize("device,version", [("tflite", "1.0"), ("qnnpack", "1.0"), ("imx500", "4.0")])
def test_other_platforms(device, version):
    model = make_model()
    tpc = mct.get_target_platform_capabilities(version, device)
    q, _ = quantize(model, target_platform_capabilities=tpc)
    x = torch.randn(16, 3, 12, 12)
    with torch.no_grad():
        assert sqnr(model(x), q(x)) > 15
    methods = {m.activation_holder_quantizer.method for m in q.modules() if isinstance(m, PytorchActivationQuantizationHolder)}
    expected = mct.QuantizationMethod.POWER_OF_TWO if device == "imx500" else mct.QuantizationMethod.UNIFORM
    assert expected in methods


def test_tpc_from_json_path(tmp_path):
    path = tmp_path / "tpc.json"
    mct.target_platform_capabilities.export_target_platform_capabilities(mct.get_target_platform_capabilities("4.0"), path)
    q, _ = quantize(target_platform_capabilities=str(path))
    assert isinstance(q, nn.Module)


@pytest.mark.parametrize("method", list(mct.QuantizationErrorMethod))
def test_every_error_method_gives_a_faithful_model(method):
    model = make_model()
    qc = mct.QuantizationConfig(activation_error_method=method, weights_error_method=method)
    q, _ = quantize(model, core_config=mct.CoreConfig(qc))
    x = torch.randn(16, 3, 12, 12)
    with torch.no_grad():
        assert sqnr(model(x), q(x)) > 12, method


def test_seed_overrides_reach_the_model():
    qc = mct.QuantizationConfig(activation_n_bits=6, weights_n_bits=4, weights_per_channel_threshold=False,
                                activation_quantization_method=mct.QuantizationMethod.UNIFORM)
    q, _ = quantize(core_config=mct.CoreConfig(qc))
    assert {m.activation_holder_quantizer.num_bits
            for m in q.modules() if isinstance(m, PytorchActivationQuantizationHolder)} == {6}
    wq = q.pw.weights_quantizers["weight"]
    assert wq.num_bits == 4 and not wq.per_channel


def test_resource_utilization_data():
    ru = mct.core.pytorch_resource_utilization_data(make_model(), gen)
    n_kernel = 16 * 3 * 9 + 16 * 9 + 16 * 16 + 16 * 10
    assert ru.weights_memory == n_kernel  # 8-bit kernels; float biases do not count (MCT's definition)
    assert ru.activation_memory > 0 and ru.total_memory == ru.weights_memory + ru.activation_memory
    assert ru.bops > 0


# ---- bad input -----------------------------------------------------------------------------------
def test_empty_representative_data():
    with pytest.raises(RepresentativeDataError, match="no batches"):
        mct.ptq.pytorch_post_training_quantization(make_model(), lambda: iter([]))


def test_data_gen_not_callable():
    with pytest.raises(RepresentativeDataError, match="callable"):
        mct.ptq.pytorch_post_training_quantization(make_model(), DATA)


def test_wrong_number_of_inputs():
    with pytest.raises(RepresentativeDataError, match="takes 1 input"):
        mct.ptq.pytorch_post_training_quantization(make_model(), lambda: iter([[DATA[0], DATA[1]]]))


def test_inconsistent_shapes():
    def other_rank():
        yield [DATA[0]]
        yield [torch.randn(8, 3, 10)]
    with pytest.raises(RepresentativeDataError, match="batch 1 has inputs of .3. dimensions.*may not"):
        mct.ptq.pytorch_post_training_quantization(make_model(), other_rank)

    def other_size():  # sizes may vary, but this model takes one size only
        yield [DATA[0]]
        yield [torch.randn(8, 3, 10, 10)]
    fixed = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 10 * 10, 2)).eval()
    with pytest.raises(RepresentativeDataError, match=r"batch 1 has input shapes \[\(3, 10, 10\)\].*the model fails"):
        mct.ptq.pytorch_post_training_quantization(fixed, other_size)


def test_nan_in_data():
    bad = DATA[0].clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(RepresentativeDataError, match="NaN or inf"):
        mct.ptq.pytorch_post_training_quantization(make_model(), lambda: iter([[bad]]))


def test_training_mode_warns_and_quantizes_eval_behaviour():
    model = make_model().train()
    with pytest.warns(UserWarning, match="training mode"):
        q, _ = mct.ptq.pytorch_post_training_quantization(model, gen)
    assert model.training  # left as the user had it
    x = torch.randn(8, 3, 12, 12)
    with torch.no_grad():
        assert sqnr(model.eval()(x), q(x)) > 20


def test_batch_of_one_warns():
    with pytest.warns(UserWarning, match="size 1"):
        mct.ptq.pytorch_post_training_quantization(make_model(), lambda: iter([[DATA[0][:1]]]))


def test_not_a_model_and_bad_config():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        mct.ptq.pytorch_post_training_quantization(lambda x: x, gen)
    with pytest.raises(ValueError, match="CoreConfig"):
        mct.ptq.pytorch_post_training_quantization(make_model(), gen, core_config=mct.QuantizationConfig())


def test_unknown_tpc_operator_set():
    base = mct.get_target_platform_capabilities()
    tpc = TargetPlatformCapabilities(default_qco=base.default_qco,
                                     operator_set=list(base.operator_set) + [OperatorsSet(name="MyFancyOp")])
    with pytest.raises(InvalidTPCError, match="'MyFancyOp'.*custom_tpc_opset_to_layer"):
        quantize(target_platform_capabilities=tpc)
    # ...and attaching layers to it makes it work
    qc = mct.QuantizationConfig(custom_tpc_opset_to_layer={"MyFancyOp": ([F.adaptive_avg_pool2d], None)})
    q, _ = quantize(target_platform_capabilities=tpc, core_config=mct.CoreConfig(qc))
    assert isinstance(q, nn.Module)


def test_model_outputs_are_not_clipped_by_default():
    model = make_model()
    with torch.no_grad():
        peak = max(model(d).abs().max().item() for d in DATA)
    q, _ = quantize(model)
    t = q.fc_activation_holder_quantizer.activation_holder_quantizer.params["threshold"]
    # no clipping, or (a power of two just below the peak) clipping it by at most 10 %
    assert t >= peak or t * 127 / 128 >= 0.9 * peak
    # None: the output is treated like every other activation (MSE may clip it)
    qc = mct.QuantizationConfig(output_activation_error_method=None, activation_error_method=mct.QuantizationErrorMethod.MAE)
    q2, _ = quantize(model, core_config=mct.CoreConfig(qc))
    assert q2.fc_activation_holder_quantizer.activation_holder_quantizer.params["threshold"] <= \
        q.fc_activation_holder_quantizer.activation_holder_quantizer.params["threshold"]


def test_progress_bars_can_be_silenced_and_ptq_logs_to_the_log_folder(tmp_path, capsys):
    from hwquant.logger import logger, progress
    mct.set_progress_bars(False)
    try:
        assert progress([1, 2], desc="x").disable
        path = mct.set_log_folder(tmp_path)
        quantize()
        for h in logger.handlers:
            h.flush()
        assert "post-training quantization of SmallNet" in path.read_text()
        assert "Statistics collection" not in capsys.readouterr().err
    finally:
        mct.set_progress_bars(True)


class TinyTransformer(nn.Module):
    """Patch embedding, attention, layer norm, GELU MLP, class token and positional constants."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, 16) * 0.1)
        self.pos = nn.Parameter(torch.randn(1, 10, 16) * 0.1)
        self.ln = nn.LayerNorm(16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1) + self.pos
        h = self.ln(t)
        t = t + self.attn(h, h, h, need_weights=False)[0]
        t = t + self.mlp(self.ln(t))
        return self.head(t[:, 0])


def test_transformer_block_quantizes():
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    data = [torch.randn(8, 3, 12, 12) for _ in range(3)]
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[d] for d in data]))
    x = torch.randn(8, 3, 12, 12)
    with torch.no_grad():
        assert sqnr(model(x), q(x)) > 15


class MultiHead(nn.Module):
    """An O-Net-like model whose heads differ in width and rank (2, 4 and 10 wide, and a rank-4 map),
    returned as a tuple, a dict, or nested."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.c1, self.c2 = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(16 * 9 * 9, 32)
        self.prob, self.box, self.landmarks = nn.Linear(32, 2), nn.Linear(32, 4), nn.Linear(32, 10)
        self.map = nn.Conv2d(16, 4, 1)

    def forward(self, x):
        y = F.relu(self.c2(F.max_pool2d(F.relu(self.c1(x)), 2)))
        f = F.relu(self.fc(y.flatten(1)))
        prob, box, landmarks = torch.softmax(self.prob(f), -1), self.box(f), self.landmarks(f)
        if self.kind == "tuple":
            return prob, box, landmarks
        if self.kind == "dict":
            return {"prob": prob, "box": box, "landmarks": landmarks}
        if self.kind == "nested":
            return prob, (box, [landmarks, self.map(y)])
        return {"heads": (prob, box), "maps": {"map": self.map(y)}, "landmarks": landmarks}


MULTI_HEAD_KINDS = ["tuple", "dict", "nested", "dict_nested"]
FACES = [[torch.randn(8, 3, 24, 24, generator=torch.Generator().manual_seed(i))] for i in range(3)]


def multi_head(kind: str) -> nn.Module:
    torch.manual_seed(0)
    return MultiHead(kind).eval()


@functools.cache
def multi_head_quantized(kind: str) -> nn.Module:
    """(shared with test_export_onnx: one quantization per kind)"""
    return mct.ptq.pytorch_post_training_quantization(multi_head(kind), lambda: iter(FACES))[0]


def leaves(out):
    """The tensors of an output structure, in order, with the structure as a nested type signature."""
    if isinstance(out, torch.Tensor):
        return [out], "T"
    items = list(out.items()) if isinstance(out, dict) else list(enumerate(out))
    parts = [(k, leaves(v)) for k, v in items]
    return [t for _, (ts, _) in parts for t in ts], (type(out).__name__, [(k, sig) for k, (_, sig) in parts])


@pytest.mark.parametrize("kind", MULTI_HEAD_KINDS)
def test_multi_head_outputs_keep_their_structure_and_follow_the_float_heads(kind):
    model, q = multi_head(kind), multi_head_quantized(kind)
    x = torch.randn(4, 3, 24, 24, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        (f_heads, f_sig), (q_heads, q_sig) = leaves(model(x)), leaves(q(x))
    assert q_sig == f_sig and [t.shape for t in q_heads] == [t.shape for t in f_heads]
    for f, y in zip(f_heads, q_heads):
        assert 10 * torch.log10(f.pow(2).sum() / (f - y).pow(2).sum()) > 20
    if kind == "dict_nested":  # mixed precision reads every head
        target = mct.core.ResourceUtilization(weights_memory=20000)  # (8-bit: about 21 kB)
        q2, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(FACES), target)
        assert info.final_resource_utilization.weights_memory <= 20000 and leaves(q2(x))[1] == f_sig
