"""Quantization-aware training: init from PTQ, training with a plain PyTorch loop, checkpoints,
DistributedDataParallel, finalize, export, and the error paths."""
import os
import pickle
import socket

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from distributed_exit import exit_rank  # tests/distributed_exit.py
from small_nets import seeded_net  # tests/small_nets.py
from torch import nn

import hwquant as mct
from hwquant.errors import InvalidConfigError
from hwquant.torch.deployment.metadata import read_metadata
from hwquant.torch.quantizers import InferableQuantizer, PytorchActivationQuantizationHolder
from hwquant.trainable_infrastructure import BasePytorchTrainableQuantizer, TrainingMethod

QAT_INIT = mct.qat.pytorch_quantization_aware_training_init_experimental
QAT_FINALIZE = mct.qat.pytorch_quantization_aware_training_finalize_experimental


@pytest.fixture(scope="module")
def setup():
    model = seeded_net()
    g = torch.Generator().manual_seed(1)
    data = [torch.randn(16, 3, 16, 16, generator=g) for _ in range(4)]
    labels = [torch.randint(0, 5, (16,), generator=g) for _ in range(4)]
    return model, data, labels


def gen_of(data):
    return lambda: iter([[d] for d in data])


def init(setup, **kw):
    model, data, _ = setup
    return QAT_INIT(model, gen_of(data), **kw)


def train(qat, data, labels, steps, opt=None, start=0):
    qat.train()
    opt = opt or torch.optim.Adam([p for p in qat.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for i in range(start, start + steps):
        loss = F.cross_entropy(qat(data[i % len(data)]), labels[i % len(labels)])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return opt, losses


LSQ = mct.qat.QATConfig(weight_training_method=TrainingMethod.LSQ, activation_training_method=TrainingMethod.LSQ)
TFLITE = mct.get_target_platform_capabilities("1.0", "tflite")  # uniform activations


@pytest.mark.parametrize("qat_config,tpc", [(mct.qat.QATConfig(), None), (LSQ, None), (LSQ, TFLITE),
                                             (mct.qat.QATConfig(), TFLITE)], ids=["ste", "lsq", "lsq-uniform",
                                                                                  "ste-uniform"])
def test_starts_at_ptq_trains_and_finalizes_bitwise(setup, qat_config, tpc):
    model, data, labels = setup
    kw = {} if tpc is None else {"target_platform_capabilities": tpc}
    ptq, _ = mct.ptq.pytorch_post_training_quantization(model, gen_of(data), **kw)
    qat, info = init(setup, qat_config=qat_config, **kw)
    assert isinstance(qat, nn.Module) and qat.training and info.final_resource_utilization is None  # no target
    quantizers = [m for m in qat.modules() if isinstance(m, BasePytorchTrainableQuantizer)]
    assert len(quantizers) >= 7 and all(q.identifier == qat_config.weight_training_method for q in quantizers
                                        if q.for_weights)
    qat.eval()
    with torch.no_grad():
        assert torch.equal(qat(data[0]), ptq(data[0]))  # QAT starts exactly where PTQ ended

    _, losses = train(qat, data, labels, 12)
    assert losses[-1] < losses[0]
    qat.eval()
    with torch.no_grad():
        trained = qat(data[1])
        assert not torch.equal(trained, ptq(data[1]))
    final = QAT_FINALIZE(qat)
    assert final is not qat and not final.training
    assert not any(isinstance(m, BasePytorchTrainableQuantizer) for m in final.modules())
    with torch.no_grad():
        assert torch.equal(final(data[1]), trained)  # the finalized model is the trained one, bitwise
    assert final.c1_bn.input_scale is not None  # deployed integer-kernel path
    assert read_metadata(final)["method"] == "qat"
    if tpc is TFLITE:
        assert any(q.method == mct.QuantizationMethod.UNIFORM for q in quantizers)


def test_gradients_reach_weights_and_quantizer_parameters(setup):
    model, data, labels = setup
    for cfg, thresholds_learn in ((mct.qat.QATConfig(), False), (LSQ, True)):
        qat, _ = init(setup, qat_config=cfg)
        F.cross_entropy(qat(data[0]), labels[0]).backward()
        for name in ("c1_bn", "c2", "fc"):
            wrapper = getattr(qat, name)
            assert wrapper.weight.grad is not None and wrapper.weight.grad.abs().sum() > 0
            assert wrapper.layer.bias.grad is not None
            wq = wrapper.weights_quantizers["weight"]
            assert wq.threshold.requires_grad == thresholds_learn
            if thresholds_learn:
                assert wq.threshold.grad is not None and wq.threshold.grad.abs().sum() > 0
        holders = [m.activation_holder_quantizer for m in qat.modules()
                   if isinstance(m, PytorchActivationQuantizationHolder)]
        assert holders and all(h.threshold.requires_grad for h in holders)
        assert any(h.threshold.grad is not None and h.threshold.grad.abs() > 0 for h in holders)


def test_checkpoint_mid_training_resumes_identically(setup, tmp_path):
    _, data, labels = setup
    qat, _ = init(setup, qat_config=LSQ)
    opt, _ = train(qat, data, labels, 3)
    torch.save({"model": qat.state_dict(), "opt": opt.state_dict()}, tmp_path / "ckpt.pt")
    train(qat, data, labels, 4, opt=opt, start=3)

    resumed, _ = init(setup, qat_config=LSQ)
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    resumed.load_state_dict(ckpt["model"])
    opt2 = torch.optim.Adam([p for p in resumed.parameters() if p.requires_grad], lr=1e-3)
    opt2.load_state_dict(ckpt["opt"])
    train(resumed, data, labels, 4, opt=opt2, start=3)
    a, b = qat.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # the whole module pickles too (torch.save(model)), holder links included
    torch.save(qat, tmp_path / "whole.pt")
    again = torch.load(tmp_path / "whole.pt", weights_only=False)
    qat.eval(), again.eval()
    with torch.no_grad():
        assert torch.equal(again(data[2]), qat(data[2]))
    linked = again.c2.__dict__["_input_holder"]
    assert any(linked is m for m in again.modules()) and not any(linked is m for m in qat.modules())


def _ddp_worker(rank, world, path, port):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    blob = torch.load(path, weights_only=False)
    model = torch.nn.parallel.DistributedDataParallel(blob["model"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in zip(blob["data"], blob["labels"]):
        half = x.shape[0] // world
        loss = F.cross_entropy(model(x[rank * half:(rank + 1) * half]), y[rank * half:(rank + 1) * half])
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        torch.save(model.module.state_dict(), path + ".out")
    exit_rank()  # without gloo's teardown, which can race the other rank's exit and abort (tests/distributed_exit.py)


def test_distributed_data_parallel_matches_single_process(setup, tmp_path):
    _, data, labels = setup
    qat, _ = init(setup, qat_config=LSQ)
    path = str(tmp_path / "ddp.pt")
    torch.save({"model": qat, "data": data[:2], "labels": labels[:2]}, path)
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_ddp_worker, args=(2, path, port), nprocs=2, join=True)
    distributed = torch.load(path + ".out", weights_only=True)

    opt = torch.optim.SGD([p for p in qat.parameters() if p.requires_grad], lr=0.05)
    for x, y in zip(data[:2], labels[:2]):  # the same steps on the whole batch: DDP averages the halves' gradients
        loss = F.cross_entropy(qat(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    single = qat.state_dict()
    moved = [k for k in single if not torch.equal(single[k], torch.load(path, weights_only=False)["model"].state_dict()[k])]
    assert len(moved) > 5
    for k in single:
        assert torch.allclose(single[k], distributed[k], atol=1e-5, rtol=1e-4), k


def test_finalized_model_exports_and_runs_in_onnxruntime(setup, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort
    _, data, labels = setup
    qat, _ = init(setup)
    train(qat, data, labels, 3)
    final = QAT_FINALIZE(qat)
    path = str(tmp_path / "qat.onnx")
    mct.exporter.pytorch_export_model(final, path, gen_of(data),
                                      quantization_format=mct.exporter.QuantizationFormat.FAKELY_QUANT)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: data[3].numpy()})[0]
    with torch.no_grad():
        want = final(data[3]).numpy()
    assert np.mean(got == want) >= 0.999
    mct.exporter.save_quantized_model(final, str(tmp_path / "qat.pt"))
    loaded = mct.exporter.load_quantized_model(str(tmp_path / "qat.pt"))
    with torch.no_grad():
        assert torch.equal(loaded(data[3]), final(data[3]))


def test_overrides_reach_the_quantizers(setup):
    cfg = mct.qat.QATConfig(activation_training_method="LSQ",
                            activation_quantizer_params_override={"freeze_quant_params": True},
                            weight_quantizer_params_override={"freeze_quant_params": False})
    qat, _ = init(setup, qat_config=cfg)
    acts = [m.activation_holder_quantizer for m in qat.modules() if hasattr(m, "activation_holder_quantizer")]
    assert acts and all(not q.threshold.requires_grad and q.identifier == TrainingMethod.LSQ for q in acts)
    assert qat.c1_bn.weights_quantizers["weight"].threshold.requires_grad


def test_mixed_precision_choice_is_trained(setup):
    model, data, _ = setup
    ru = mct.core.pytorch_resource_utilization_data(model, gen_of(data))
    target = mct.core.ResourceUtilization(weights_memory=ru.weights_memory * 0.6)
    qat, info = init(setup, target_resource_utilization=target)
    assert info.mixed_precision_cfg is not None
    bits = sorted({m.weights_quantizers["weight"].num_bits for m in qat.modules() if hasattr(m, "weights_quantizers")})
    assert bits[0] < 8
    assert info.final_resource_utilization.weights_memory <= target.weights_memory


# ------------------------------------------------------------------------------------------ errors
def test_bad_configs_are_refused(setup):
    with pytest.raises(InvalidConfigError, match="qat_config must be a QATConfig"):
        init(setup, qat_config={"weight_training_method": "LSQ"})
    with pytest.raises(ValueError, match="training method must be one of"):
        mct.qat.QATConfig(weight_training_method="ADAROUND")
    with pytest.raises(TypeError, match="unexpected argument 'weight_method'"):
        mct.qat.QATConfig(weight_method="LSQ")
    with pytest.raises(ValueError, match="dict of quantizer constructor arguments"):
        mct.qat.QATConfig(weight_quantizer_params_override=["freeze_quant_params"])
    with pytest.raises(InvalidConfigError, match=r"\['learning_rate'\].*accepts \['freeze_quant_params'\]"):
        init(setup, qat_config=mct.qat.QATConfig(weight_quantizer_params_override={"learning_rate": 1}))
    with pytest.raises(InvalidConfigError, match=r"cannot train every quantizer:\n  'x' activation: .*DQA"):
        init(setup, qat_config=mct.qat.QATConfig(activation_training_method=TrainingMethod.DQA))


def test_finalize_refuses_models_without_trainable_quantizers(setup):
    model, data, _ = setup
    ptq, _ = mct.ptq.pytorch_post_training_quantization(model, gen_of(data))
    with pytest.raises(InvalidConfigError, match="already an inferable quantized model .* no trainable quantizers"):
        QAT_FINALIZE(ptq)
    with pytest.raises(InvalidConfigError, match=r"no trainable quantizers \(it is not quantized\)"):
        QAT_FINALIZE(model)
    with pytest.raises(InvalidConfigError, match="torch.nn.Module"):
        QAT_FINALIZE("model.pt")


def test_finalize_leaves_the_qat_model_training_on(setup):
    """Finalizing at an intermediate epoch: the QAT model keeps its trainable quantizers and training
    state, trains on, and finalizing it again gives what the first finalize gave then (bitwise)."""
    _, data, labels = setup
    qat, _ = init(setup, qat_config=LSQ)
    opt, _ = train(qat, data, labels, 4)
    qat.eval()
    with torch.no_grad():
        trained = qat(data[1])
    before = {k: v.clone() for k, v in qat.state_dict().items()}
    n_trainable = sum(isinstance(m, BasePytorchTrainableQuantizer) for m in qat.modules())
    first = QAT_FINALIZE(qat)
    assert sum(isinstance(m, BasePytorchTrainableQuantizer) for m in qat.modules()) == n_trainable >= 7
    assert all(torch.equal(v, before[k]) for k, v in qat.state_dict().items())
    assert isinstance(qat.x_activation_holder_quantizer.activation_holder_quantizer, BasePytorchTrainableQuantizer)
    assert qat.c1_bn.input_scale is None  # still the trainable path, reading the holder's current grid
    again = QAT_FINALIZE(qat)
    assert again is not first and first.node_to_activation_quantization_holder == qat.node_to_activation_quantization_holder
    with torch.no_grad():
        assert torch.equal(first(data[1]), trained) and torch.equal(again(data[1]), trained)
        assert torch.equal(first(data[2]), again(data[2]))
    _, losses = train(qat, data, labels, 4, opt=opt, start=4)  # the optimizer's parameters are still the model's
    qat.eval()
    with torch.no_grad():
        assert not torch.equal(qat(data[1]), trained)
        assert torch.equal(QAT_FINALIZE(qat)(data[1]), qat(data[1]))
        assert torch.equal(first(data[1]), trained)  # the earlier finalized model did not move with it
    with pytest.raises(InvalidConfigError, match="already finalized"):
        QAT_FINALIZE(first)


def test_a_diverged_model_is_refused_and_left_as_it_was(setup):
    qat, _ = init(setup, qat_config=LSQ)
    with torch.no_grad():
        qat.fc.weights_quantizers["weight"].threshold[0] = float("nan")
    before = pickle.dumps({k: v.clone() for k, v in qat.state_dict().items()})
    with pytest.raises(InvalidConfigError, match="training diverged.*in fc.trainable_quantizers.weight"):
        QAT_FINALIZE(qat)
    assert sum(isinstance(m, BasePytorchTrainableQuantizer) for m in qat.modules()) >= 7  # nothing swapped
    after = qat.state_dict()
    assert all(torch.equal(v, after[k]) or torch.isnan(v).any() for k, v in pickle.loads(before).items())
    assert isinstance(qat.x_activation_holder_quantizer.activation_holder_quantizer, BasePytorchTrainableQuantizer)
    assert not isinstance(qat.x_activation_holder_quantizer.activation_holder_quantizer, InferableQuantizer)


def test_nan_weights_are_refused_naming_the_layers(setup):
    qat, _ = init(setup)
    with torch.no_grad():
        qat.fc.weight[0, 0] = float("nan")
        qat.fc.layer.bias[1] = float("inf")
    with pytest.raises(InvalidConfigError, match=r"training diverged: 2 tensors .* in fc, fc.layer; the model is left"):
        QAT_FINALIZE(qat)
    assert any(isinstance(m, BasePytorchTrainableQuantizer) for m in qat.modules())
