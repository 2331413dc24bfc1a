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
    from hwquant.torch.capture.routes import capture

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


def test_torchs_process_wide_settings_hold_while_a_call_computes(tmp_path):
    """torch.export switches oneDNN and NNPACK off and raises torch.compiler's flag process-wide while it
    runs, torch.onnx raises its exporting flag: another thread's capture or export must not do so while a
    call computes (its convolutions would round differently, its optimisers take another path)."""
    import torch.backends.mkldnn

    from hwquant.torch.capture.routes import capture

    def settings():
        return (torch.backends.mkldnn.enabled, torch._C._get_nnpack_enabled(), torch.compiler.is_compiling(),
                torch.onnx.is_in_onnx_export())

    before, seen = settings(), set()
    exporting, quantized = _seeded(_ShapeBranch, 3), _ptq(_cnn(0))
    batches = [torch.randn(2, 8, 12, 12, generator=torch.Generator().manual_seed(k)) for k in range(40)]

    def observed():
        for b in batches:
            seen.add(settings())
            yield [b]

    done, errors = threading.Event(), []

    def capture_and_export():
        try:
            while not done.is_set():
                capture(exporting, [batches[0]])
                mct.exporter.pytorch_export_model(quantized, tmp_path / "m.onnx", _data())
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {e}")

    other = threading.Thread(target=capture_and_export)
    other.start()
    try:
        for _ in range(3):
            mct.ptq.pytorch_post_training_quantization(_cnn(1), observed)
    finally:
        done.set()
        other.join(120)
    assert errors == [] and seen == {before}, (errors[:2], seen)


def test_calls_of_every_kind_at_once_give_the_sequential_results():
    """The short version of benchmarks/run_threads.py: PTQ on each capture route, mixed precision, GPTQ,
    QAT, ONNX export, the troubleshooting report, pruning and data generation, eight threads at once on two
    cores, each call on its own model; every result bitwise the one it gives alone."""
    from benchmarks import thread_stress as stress

    references = stress.references_of(stress.TORCH_JOBS)
    result = stress.run_rounds(stress.TORCH_JOBS, references, threads=8, rounds=3)
    assert result.errors == [] and result.differences == [], (result.errors[:3], result.differences)


def test_a_model_keeps_its_integer_arithmetic_while_another_thread_exports(tmp_path):
    """torch.onnx's exporting flag is process-wide: a quantized model run in another thread (a server) while
    hwquant exports keeps its integer arithmetic (only the exporting thread's tracer takes the export path)."""
    from hwquant.torch.quantizers import _exporting_in_this_thread

    served, exported, x = _ptq(_cnn(0)), _ptq(_cnn(1)), torch.randn(4, 8, 12, 12)
    with torch.no_grad():
        want = served(x)
    done, flag_seen, wrong, runs = threading.Event(), threading.Event(), [], [0]

    def serve():
        while not done.is_set():
            with torch.no_grad():
                y = served(x)
            if torch.onnx.is_in_onnx_export():
                flag_seen.set()
                if _exporting_in_this_thread():
                    wrong.append("took the export path")
            if not torch.equal(y, want):
                wrong.append("different output")
            runs[0] += 1

    server = threading.Thread(target=serve)
    server.start()
    try:
        for k in range(40):  # until the server has run during an export
            mct.exporter.pytorch_export_model(exported, tmp_path / f"m{k % 2}.onnx", _data())
            if flag_seen.is_set():
                break
    finally:
        done.set()
        server.join(60)
    assert flag_seen.is_set() and wrong == [], (runs[0], wrong[:3])


def test_the_shared_exclusive_lock():
    """Shared holds overlap, an exclusive one runs alone; both reentrant; two shared holders asking for it
    exclusively both get it in turn (each gives its shared hold up while it waits)."""
    from hwquant.concurrency import SharedExclusiveLock

    lock, inside, overlaps, log = SharedExclusiveLock(), [0], [], []
    both_shared = threading.Barrier(2, timeout=10)

    def worker(k):
        with lock.shared, lock.shared:  # reentrant
            both_shared.wait()  # two shared holders at once
            with lock.exclusive, lock.exclusive, lock.shared:  # the upgrade, reentrant
                inside[0] += 1
                overlaps.append(inside[0])
                log.append(k)
                inside[0] -= 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert sorted(log) == [0, 1] and overlaps == [1, 1]
    # a waiting exclusive request keeps new shared holders out
    order, held = [], threading.Event()

    def exclusive_later():
        held.wait(10)
        with lock.exclusive:
            order.append("exclusive")

    with lock.shared:
        t = threading.Thread(target=exclusive_later)
        t.start()
        held.set()
        while not lock._waiting:  # (the request is queued)
            threading.Event().wait(0.01)
        late = threading.Thread(target=lambda: (lock.shared.__enter__(), order.append("shared"), lock.shared.__exit__()))
        late.start()
        threading.Event().wait(0.2)
        assert order == []
    t.join(10)
    late.join(10)
    assert order == ["exclusive", "shared"]
