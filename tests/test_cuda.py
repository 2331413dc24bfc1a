"""On a CUDA device (skipped without one): calibration runs where the model is, the quantized model
lives there, its integer-kernel layers give the CPU's outputs bit for bit, and it exports and
saves like a CPU model."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hwquant as mct

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.pw = nn.Conv2d(16, 16, 1)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        y = self.stem(x)
        y = y + self.pw(self.dw(y))
        return self.fc(torch.flatten(F.max_pool2d(y, 2), 1))


def _data(device):
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(16, 3, 16, 16, generator=g).to(device)] for _ in range(4)]


def _quantize(device):
    torch.manual_seed(0)
    model = Net().eval().to(device)
    data = _data(device)
    return mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data))[0]


def test_ptq_on_cuda_matches_cpu():
    q_gpu, q_cpu = _quantize("cuda"), _quantize("cpu")
    assert all(b.device.type == "cuda" for b in q_gpu.buffers())
    assert all(p.device.type == "cuda" for p in q_gpu.parameters())
    # same thresholds (statistics on the GPU agree with the CPU's)
    from mct_quantizers import PytorchActivationQuantizationHolder
    holders = lambda q: {n: m.activation_holder_quantizer.threshold_np.tolist() for n, m in q.named_modules()  # noqa: E731
                         if isinstance(m, PytorchActivationQuantizationHolder)}
    assert len(holders(q_cpu)) >= 4 and holders(q_gpu) == holders(q_cpu)
    x = torch.randn(32, 3, 16, 16)
    with torch.no_grad():
        out_gpu, out_cpu = q_gpu(x.cuda()).cpu(), q_cpu(x)
    # integer-kernel layers are exact on both devices: the outputs agree bit for bit
    assert (out_gpu == out_cpu).double().mean() >= 0.999


def test_export_and_save_from_cuda(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    q = _quantize("cuda")
    data = _data("cuda")
    path = mct.exporter.pytorch_export_model(q, tmp_path / "m.onnx", lambda: iter(data),
                                             quantization_format=mct.exporter.QuantizationFormat.FAKELY_QUANT)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(8, 3, 16, 16)
    out = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = q(x.cuda()).cpu().numpy()
    assert (out == ref).mean() >= 0.999
    saved = mct.exporter.save_quantized_model(q, tmp_path / "q.pt")
    loaded = mct.exporter.load_quantized_model(saved, map_location="cuda")
    with torch.no_grad():
        assert torch.equal(loaded(x.cuda()), q(x.cuda()))
    np.testing.assert_array_equal(q(x.cuda()).detach().cpu().numpy(), ref)


def test_qat_trains_and_finalizes_on_cuda():
    torch.manual_seed(0)
    model = Net().eval().cuda()
    data = _data("cuda")
    cfg = mct.qat.QATConfig(weight_training_method="LSQ", activation_training_method="LSQ")
    qat, _ = mct.qat.pytorch_quantization_aware_training_init_experimental(model, lambda: iter(data), qat_config=cfg)
    assert all(p.device.type == "cuda" for p in qat.parameters())
    opt = torch.optim.Adam([p for p in qat.parameters() if p.requires_grad], lr=1e-3)
    labels = torch.randint(0, 10, (16,), device="cuda")
    losses = []
    for step in range(10):
        loss = F.cross_entropy(qat(data[step % 4][0]), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    qat.eval()
    with torch.no_grad():
        trained = qat(data[0][0])
    final = mct.qat.pytorch_quantization_aware_training_finalize_experimental(qat)
    assert all(b.device.type == "cuda" for b in final.buffers())
    with torch.no_grad():
        assert torch.equal(final(data[0][0]), trained)


def test_gptq_runs_on_cuda_and_matches_the_cpu_run_closely():
    torch.manual_seed(0)
    model = Net().eval()
    cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=4))
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=2)
    cpu, _ = mct.gptq.pytorch_gradient_post_training_quantization(model, lambda: iter(_data("cpu")), core_config=cc,
                                                                  gptq_config=cfg)
    gpu, info = mct.gptq.pytorch_gradient_post_training_quantization(
        copy.deepcopy(model).cuda(), lambda: iter(_data("cuda")), core_config=cc, gptq_config=cfg)
    assert all(p.device.type == "cuda" for p in gpu.parameters()) and info.gptq_info_dict["steps"] == 8
    x = _data("cpu")[0][0]
    with torch.no_grad():
        diff = (gpu(x.cuda()).cpu() - cpu(x)).abs().max()
    assert float(diff) < 0.5 * float(cpu(x).abs().max())  # float rounding differences may flip a few roundings


def test_mixed_precision_and_mctq_export_from_cuda(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime_extensions")
    import mct_quantizers
    torch.manual_seed(0)
    model = Net().eval().cuda()
    data = _data("cuda")
    gen = lambda: iter(data)  # noqa: E731
    full = mct.core.pytorch_resource_utilization_data(model, gen)
    q, info = mct.ptq.pytorch_post_training_quantization(
        model, gen, target_resource_utilization=mct.core.ResourceUtilization(weights_memory=full.weights_memory * 0.6))
    assert info.final_resource_utilization.weights_memory <= full.weights_memory * 0.6
    assert {w.weights_quantizers["weight"].num_bits for w in q.modules() if hasattr(w, "weights_quantizers")} != {8}
    path = mct.exporter.pytorch_export_model(q, tmp_path / "m.onnx", gen)
    sess = ort.InferenceSession(str(path), mct_quantizers.get_ort_session_options(), providers=["CPUExecutionProvider"])
    x = torch.randn(8, 3, 16, 16)
    out = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = q(x.cuda()).cpu().numpy()
    step = q.get_submodule("fc_activation_holder_quantizer").activation_holder_quantizer.scale.item()
    assert np.abs(out - ref).max() <= step * 1.0001


def test_mct_wrapper_on_cuda(tmp_path):
    torch.manual_seed(0)
    data = _data("cuda")
    ok, q = mct.wrapper.MCTWrapper().quantize_and_export(
        Net().eval().cuda(), lambda: iter(data), method="GPTQ", use_mixed_precision=True,
        param_items=[["n_epochs", 1], ["save_model_path", str(tmp_path / "q.onnx")]])
    assert ok and (tmp_path / "q.onnx").is_file() and all(p.device.type == "cuda" for p in q.parameters())
