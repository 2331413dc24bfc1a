"""Concurrent calls against sequential ones: every public call of hwquant, each on its own model, run in
several threads at once (more threads than cores), round after round; each call's result must equal,
bit for bit, what the same call gives alone.

A job builds its own model and data from its own seeded generator (nothing is drawn from torch's
process-wide one, which other threads share) and returns a fingerprint: the quantized model's outputs
on fixed inputs, an exported file's bytes, a report's figures. `run_rounds` deals the jobs to the threads
so that each round mixes different calls and models.

Used by tests/test_threads.py (a short run) and benchmarks/run_threads.py (the stress run of
docs/BENCHMARKS.md, "Threads").
"""
from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

Fingerprint = Tuple[Any, ...]


# ------------------------------------------------------------------------------------------ PyTorch jobs
def _torch():
    import torch
    from torch import nn
    return torch, nn


def _made(make: Callable[[], Any], seed: int):
    """``make()`` under a private seed (torch's generator saved and restored around it, under one lock: the
    generator is process-wide, and a layer's random initialisation in one thread would otherwise change the
    weights another thread is initialising)."""
    torch, _ = _torch()
    with _MAKING:
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            return make()
        finally:
            torch.random.set_rng_state(state)


def _seeded(make: Callable[[], Any], seed: int):
    """A model made under a private seed, in eval mode."""
    return _made(make, seed).eval()


_MAKING = threading.Lock()


def _batches(seed: int, shape: Sequence[int], n: int = 2) -> List[Any]:
    torch, _ = _torch()
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(n)]


def _cnn(width: int = 8, depth: int = 4):
    _, nn = _torch()
    layers: List[Any] = [nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU6()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))


def _residual():
    torch, nn = _torch()

    class Residual(nn.Module):
        """Residual adds, a depthwise convolution, a negative-valued activation (shift-negative
        correction's case) and a concatenation."""

        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.Hardswish())
            self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.SiLU())
            self.pw = nn.Conv2d(16, 16, 1)
            self.head = nn.Linear(32, 10)

        def forward(self, x):
            x = self.stem(x)
            y = x + self.pw(self.dw(x))
            z = torch.cat([y, torch.relu(x)], 1)
            return self.head(z.mean((2, 3)))

    return Residual()


def _shape_branch():
    torch, nn = _torch()

    class ShapeBranch(nn.Module):
        """Python control flow on a shape: torch.fx cannot capture it, torch.export can."""

        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 10)

        def forward(self, x):
            y = self.conv(x)
            if y.shape[-1] > 4:
                y = torch.relu(y)
            return self.fc(y.mean((2, 3)))

    return ShapeBranch()


def _value_branch():
    torch, nn = _torch()

    class ValueBranch(nn.Module):
        """A shape read as a tensor's values (as models converted from ONNX do): only the real-input trace
        captures it."""

        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 10)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            shape = torch.tensor(y.shape)
            flat = y.reshape(torch.cat([shape[:2], torch.tensor([-1])]).tolist())
            return self.fc(flat.mean(2))

    return ValueBranch()


def _outputs(model, inputs) -> Fingerprint:
    torch, _ = _torch()
    with torch.no_grad():
        y = model(*inputs)
    return tuple(t.detach().cpu().clone() for t in (y if isinstance(y, (list, tuple)) else [y]))


def _ptq_job(make: Callable[[], Any], seed: int, shape=(4, 3, 16, 16), **kwargs) -> Callable[[], Fingerprint]:
    def job() -> Fingerprint:
        import hwquant as mct
        model, data = _seeded(make, seed), _batches(seed, shape)
        q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[b] for b in data]), **kwargs)
        return _outputs(q, [data[0]])
    return job


def _mixed_precision_job() -> Fingerprint:
    import hwquant as mct
    model, data = _seeded(_residual, 11), _batches(11, (4, 3, 16, 16))
    target = mct.core.ResourceUtilization(weights_memory=0.6 * sum(p.numel() for p in model.parameters()))
    q, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[b] for b in data]), target)
    return (*_outputs(q, [data[0]]), tuple(info.mixed_precision_cfg))


def _gptq_job() -> Fingerprint:
    import hwquant as mct
    model, data = _seeded(_cnn, 12), _batches(12, (4, 3, 16, 16))
    cc = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=4))
    q, _ = mct.gptq.pytorch_gradient_post_training_quantization(
        model, lambda: iter([[b] for b in data]), core_config=cc, gptq_config=mct.gptq.get_pytorch_gptq_config(2))
    return _outputs(q, [data[0]])


def _qat_job() -> Fingerprint:
    import hwquant as mct
    torch, _ = _torch()
    model, data = _seeded(_cnn, 13), _batches(13, (4, 3, 16, 16))
    qat, _ = mct.qat.pytorch_quantization_aware_training_init_experimental(model, lambda: iter([[b] for b in data]))
    qat.train()
    optimizer = torch.optim.SGD(qat.parameters(), lr=1e-3)
    for b in data:  # two deterministic training steps
        optimizer.zero_grad()
        qat(b).square().mean().backward()
        optimizer.step()
    final = mct.qat.pytorch_quantization_aware_training_finalize_experimental(qat)
    return _outputs(final.eval(), [data[0]])


def _export_job() -> Fingerprint:
    import hwquant as mct
    model, data = _seeded(_residual, 14), _batches(14, (4, 3, 16, 16))
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[b] for b in data]))
    with tempfile.TemporaryDirectory() as folder:
        path = mct.exporter.pytorch_export_model(q, Path(folder) / "m.onnx", lambda: iter([[data[0]]]))
        return (Path(path).read_bytes(),)


def _report_job() -> Fingerprint:
    import hwquant as mct
    model, data = _seeded(_cnn, 15), _batches(15, (4, 3, 16, 16))
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[b] for b in data]))
    with tempfile.TemporaryDirectory() as folder:
        result = mct.xquant.xquant_report_pytorch_experimental(
            model, q, lambda: iter([[b] for b in data]), lambda: iter([[data[1]]]),
            mct.xquant.XQuantConfig(folder))
    return (repr(sorted(result.items(), key=lambda kv: kv[0])),)


def _pruning_job() -> Fingerprint:
    import hwquant as mct
    model, data = _seeded(lambda: _cnn(64, 3), 16), _batches(16, (4, 3, 16, 16))
    target = mct.core.ResourceUtilization(weights_memory=4 * 0.7 * sum(p.numel() for p in model.parameters()))
    pruned, info = mct.pruning.pytorch_pruning_experimental(
        model, target, lambda: iter([[b] for b in data]), mct.pruning.PruningConfig(num_score_approximations=2))
    return (*_outputs(pruned, [data[0]]), repr(info.pruning_masks if hasattr(info, "pruning_masks") else info))


def _data_generation_job() -> Fingerprint:
    import hwquant as mct
    torch, _ = _torch()
    model = _seeded(_cnn, 17)
    config = mct.data_generation.get_pytorch_data_generation_config(
        n_iter=4, data_gen_batch_size=4, image_normalization_type=mct.data_generation.ImageNormalizationType
        .NO_NORMALIZATION, extra_pixels=0)
    images = mct.data_generation.pytorch_data_generation_experimental(model, 4, 16, config)
    return (torch.cat(list(images)),)


def _real_model_job(name: str) -> Callable[[], Fingerprint]:
    def job() -> Fingerprint:
        import hwquant as mct
        from benchmarks import real_models
        real = _made(real_models.REGISTRY[name], 0)  # (the loader builds the network before loading its weights)
        data = [real.make_inputs(4, k) for k in range(2)]
        q, _ = mct.ptq.pytorch_post_training_quantization(real.model.eval(), lambda: iter(data))
        return _outputs(q, data[0])
    return job


# -------------------------------------------------------------------------------------------- Keras jobs
def _keras_model(seed: int):
    import keras
    initializer = keras.initializers.GlorotUniform(seed=seed)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", kernel_initializer=initializer)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", depthwise_initializer=initializer)(x)
    x = keras.layers.Activation("swish")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10, kernel_initializer=initializer)(x))


def keras_numpy(x) -> np.ndarray:
    import keras
    return np.asarray(keras.ops.convert_to_numpy(x))


def _keras_ptq_job(seed: int) -> Callable[[], Fingerprint]:
    def job() -> Fingerprint:
        import hwquant as mct
        model = _keras_model(seed)
        rng = np.random.default_rng(seed)
        data = [rng.standard_normal((4, 16, 16, 3)).astype(np.float32) for _ in range(2)]
        q, _ = mct.ptq.keras_post_training_quantization(model, lambda: iter([[b] for b in data]))
        return (keras_numpy(q(data[0])),)
    return job


def _keras_export_job() -> Fingerprint:
    import hwquant as mct
    model = _keras_model(21)
    rng = np.random.default_rng(21)
    data = [rng.standard_normal((4, 16, 16, 3)).astype(np.float32) for _ in range(2)]
    q, _ = mct.ptq.keras_post_training_quantization(model, lambda: iter([[b] for b in data]))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.keras"
        mct.exporter.keras_export_model(q, path)
        again = mct.keras_load_quantized_model(path)
        return (keras_numpy(again(data[0])),)


# ---------------------------------------------------------------------------------------------- the runs
TORCH_JOBS: Dict[str, Callable[[], Fingerprint]] = {
    "PTQ, fx capture (CNN)": _ptq_job(_cnn, 1),
    "PTQ, fx capture (residual, SiLU, concat)": _ptq_job(_residual, 2),
    "PTQ, torch.export capture": _ptq_job(_shape_branch, 3),
    "PTQ, real-input trace capture": _ptq_job(_value_branch, 4),
    "mixed precision": _mixed_precision_job,
    "GPTQ": _gptq_job,
    "QAT init, training, finalize": _qat_job,
    "ONNX export": _export_job,
    "troubleshooting report": _report_job,
    "pruning": _pruning_job,
    "data generation": _data_generation_job,
}
REAL_JOBS: Dict[str, Callable[[], Fingerprint]] = {
    "PTQ, MTCNN O-Net (real)": _real_model_job("mtcnn_onet"),
    "PTQ, MTCNN R-Net (real)": _real_model_job("mtcnn_rnet"),
}
KERAS_JOBS: Dict[str, Callable[[], Fingerprint]] = {
    "Keras PTQ (a)": _keras_ptq_job(31),
    "Keras PTQ (b)": _keras_ptq_job(32),
    "Keras export and load": _keras_export_job,
}


def same(a: Fingerprint, b: Fingerprint) -> bool:
    """Bitwise equality of two fingerprints (tensors, arrays, bytes, text)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        if hasattr(y, "detach"):
            y = y.detach().cpu().numpy()
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (np.shape(x) == np.shape(y) and np.asarray(x).tobytes() == np.asarray(y).tobytes()):
                return False
        elif x != y:
            return False
    return True


@dataclass
class StressResult:
    threads: int
    rounds: int
    calls: int = 0
    differences: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    seconds: float = 0.0


def _call(job: Callable[[], Fingerprint], k: int, got: Dict[int, Fingerprint], errors: List[str], where: str) -> None:
    try:
        got[k] = job()
    except Exception as e:  # noqa: BLE001 - any failure is a finding
        errors.append(f"{where}: {type(e).__name__}: {e}")


def run_rounds(jobs: Dict[str, Callable[[], Fingerprint]], references: Dict[str, Fingerprint], threads: int,
               rounds: int, timeout_s: float = 600.0) -> StressResult:
    """``rounds`` rounds of ``threads`` concurrent calls; round r gives thread k the job
    ``(r * threads + k) % len(jobs)`` (every job meets different neighbours across rounds)."""
    import time
    names = list(jobs)
    result = StressResult(threads, rounds)
    start = time.perf_counter()
    for r in range(rounds):
        picked = [names[(r * threads + k) % len(names)] for k in range(threads)]
        got: Dict[int, Fingerprint] = {}

        workers = [threading.Thread(target=_call, args=(jobs[name], k, got, result.errors, f"round {r}, {name}"),
                                    daemon=True) for k, name in enumerate(picked)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout_s)
        for k, name in enumerate(picked):
            result.calls += 1
            if k in got and not same(got[k], references[name]):
                result.differences.append(f"round {r}, {name}")
    result.seconds = time.perf_counter() - start
    return result


def references_of(jobs: Dict[str, Callable[[], Fingerprint]]) -> Dict[str, Fingerprint]:
    """Each job's result run alone (twice: a job that is not deterministic on its own is no test)."""
    refs = {}
    for name, job in jobs.items():
        first, second = job(), job()
        if not same(first, second):
            raise AssertionError(f"{name} is not deterministic even when run alone")
        refs[name] = first
    return refs


