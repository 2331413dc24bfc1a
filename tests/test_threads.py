"""Quantizing in one thread breaks nothing in another: bounded stress tests (threads x rounds) whose
verdict does not depend on the timing (README: "Threads")."""
import sys
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hwquant as mct


def _cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(6) for m in (nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())],
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()


def _data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    batches = [torch.randn(8, 8, 12, 12, generator=g) for _ in range(2)]
    return lambda: iter([[b] for b in batches])


@pytest.fixture(autouse=True)
def often_switching_threads():
    """Threads take turns every 10 us instead of 5 ms: the interleavings a loaded server sees, within a
    short test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def _ptq(model):
    return mct.ptq.pytorch_post_training_quantization(model, _data())[0]


def test_other_threads_models_run_unaffected_while_a_model_is_captured():
    from hwquant.torch.capture import capture

    other, model, x = _cnn(1), _cnn(0), torch.randn(2, 8, 12, 12)
    with torch.no_grad():
        want = other(x)
    errors, runs, done = [], [0], threading.Event()

    def serve():
        while not done.is_set():
            try:
                with torch.no_grad():
                    if not torch.equal(other(x), want):
                        errors.append("different output")
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                errors.append(f"{type(e).__name__}: {e}")
            runs[0] += 1

    server = threading.Thread(target=serve)
    server.start()
    try:
        for _ in range(10):
            capture(model, [x])
        _ptq(model)
    finally:
        done.set()
        server.join(timeout=60)
    assert runs[0] > 0 and errors == [], errors[:3]


def test_concurrent_quantizations_give_the_sequential_results():
    model, x = _cnn(0), torch.randn(4, 8, 12, 12)  # (made here: torch's random generator is process-wide)
    with torch.no_grad():
        want = _ptq(model)(x)
    results, errors = [], []

    def quantize():
        try:
            for _ in range(2):
                with torch.no_grad():
                    results.append(_ptq(model)(x))
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=quantize) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and len(results) == 6, errors[:3]
    assert all(torch.equal(r, want) for r in results)


def test_an_open_tpc_block_belongs_to_its_thread():
    """`with fqc:` in one thread: OperationsSetToLayers made in another thread attach nowhere, and
    get_current_tpc() there says no block is open."""
    from hwquant.errors import InvalidTPCError
    from hwquant.tpc import FrameworkQuantizationCapabilities, OperationsSetToLayers

    fqc = FrameworkQuantizationCapabilities(mct.get_target_platform_capabilities("1.0"))
    opened, checked, seen = threading.Event(), threading.Event(), []

    def other():
        opened.wait(10)
        OperationsSetToLayers("Conv", [nn.Conv1d])
        try:
            mct.target_platform_capabilities.get_current_tpc()
        except InvalidTPCError:
            seen.append("no block open here")
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    with fqc:
        opened.set()
        checked.wait(10)
        OperationsSetToLayers("Conv", [nn.Conv2d])
        assert mct.target_platform_capabilities.get_current_tpc() is fqc
    t.join(10)
    assert seen == ["no block open here"] and fqc.get_layers_by_opset_name("Conv") == [nn.Conv2d]


def test_concurrent_onnx_exports_write_the_sequential_file(tmp_path):
    model = _cnn(0)
    quantized = _ptq(model)
    want = mct.exporter.pytorch_export_model(quantized, tmp_path / "want.onnx", _data()).read_bytes()
    errors = []

    def export(k):
        try:
            for r in range(2):
                mct.exporter.pytorch_export_model(quantized, tmp_path / f"t{k}_{r}.onnx", _data())
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=export, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [], errors[:3]
    files = sorted(tmp_path.glob("t*.onnx"))
    assert len(files) == 6 and all(f.read_bytes() == want for f in files)
    assert not list(tmp_path.glob(".hwquant-*"))  # no temporary left


class _Functional(nn.Module):
    """F.conv2d / F.linear on its own parameters: capture turns them into layers."""

    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Parameter(torch.randn(8, 8, 3, 3) * 0.2), nn.Parameter(torch.randn(4, 8) * 0.3)

    def forward(self, x):
        return F.linear(F.relu(F.conv2d(x, self.w1, padding=1)).mean((2, 3)), self.w2)


class _ShapeBranch(nn.Module):
    """Control flow on a shape: captured through torch.export."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(8, 8, 3), nn.Linear(8, 4)

    def forward(self, x):
        y = self.conv(x)
        if y.shape[-1] > 4:
            y = torch.relu(y)
        return self.fc(y.mean((2, 3)))


def _collapsing(seed: int) -> nn.Module:  # conv -> conv: linear collapsing builds a new layer
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4)).eval()


def _seeded(cls, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return cls().eval()


_MODELS = [lambda: _cnn(0), lambda: _collapsing(1), lambda: _seeded(_Functional, 2), lambda: _seeded(_ShapeBranch, 3)]


@pytest.mark.parametrize("make", _MODELS, ids=["cnn", "collapsing", "functional", "torch.export"])
def test_quantizing_leaves_torchs_random_generator_alone(make):
    """torch's generator is process-wide: a layer made with a random initialisation during a
    quantization (then overwritten) changed another thread's (and the caller's) random numbers."""
    model = make()
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    _ptq(model)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_more_threads_than_cores_give_the_sequential_results():
    """Six threads (more than the cores of a small machine), models of every capture path; each thread
    seeds and makes its own model (taking turns with the other threads' model making, as a program
    would), then quantizes it while the others quantize theirs."""
    x = torch.randn(4, 8, 12, 12)
    with torch.no_grad():
        want = [_ptq(make())(x) for make in _MODELS]
    n_threads, rounds = 6, 2
    made, results, errors = threading.Lock(), {}, []

    def quantize(k):
        try:
            for r in range(rounds):
                with made:
                    model = _MODELS[k % len(_MODELS)]()
                with torch.no_grad():
                    results[k, r] = _ptq(model)(x)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=quantize, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == [] and len(results) == n_threads * rounds, errors[:3]
    differ = sorted(k for (k, _), y in results.items() if not torch.equal(y, want[k % len(_MODELS)]))
    assert differ == [], f"threads {differ} differ from the sequential result"


def test_mixed_precision_under_the_callers_no_grad():
    """Grad mode is a thread's own setting: the sensitivity probes (gradients) run whatever the caller's."""
    model, data = _cnn(0), _data()
    target = mct.core.ResourceUtilization(weights_memory=2400)
    want = mct.ptq.pytorch_post_training_quantization(model, data, target)[1].mixed_precision_cfg
    with torch.no_grad():
        got = mct.ptq.pytorch_post_training_quantization(model, data, target)[1].mixed_precision_cfg
    assert got == want
