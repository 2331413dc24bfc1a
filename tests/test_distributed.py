"""Quantization across processes (torch.distributed, gloo on CPU): two spawned ranks against one process
reading all of their data (tests/distributed_workers.py runs both). PTQ thresholds and mixed precision
are bitwise the single process's; GPTQ equals it within training noise and is identical on both ranks;
QAT trains under DDP and FSDP; bad set-ups stop every rank with a message."""
from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import distributed_workers as workers  # tests/distributed_workers.py
import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from hwquant.core.pipeline.distributed import SINGLE_PROCESS, Collective, global_batches, statistics_pass
from hwquant.core.statistics.tensor_statistics import TensorStatistics, summarize
from hwquant.errors import InvalidConfigError

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario: str, folder, timeout_s: float = 240):
    """Run ``scenario`` on two spawned ranks (they inherit this process's environment); returns (each rank's
    saved result or None, exit codes)."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=workers.worker, args=(r, workers.WORLD, port, scenario, str(folder)))
             for r in range(workers.WORLD)]
    for p in procs:
        p.start()
    deadline = time.time() + timeout_s
    for p in procs:
        p.join(max(deadline - time.time(), 1))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert not hung, f"rank(s) {hung} hung in {scenario}"
    results = []
    for r in range(workers.WORLD):
        path = folder / f"{scenario}_{r}.pt"
        results.append(torch.load(path, weights_only=False) if path.exists() else None)
    return results, [p.exitcode for p in procs]


@pytest.fixture(scope="module")
def single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank runs: float reductions split the same way
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, single_thread):
    folder = tmp_path_factory.mktemp("ranks")
    ranks, codes = launch("quantize", folder)
    for r in ranks:
        assert r is not None and "ok" in r, r and r.get("trace")
    return workers.quantize(0, 1), [r["ok"] for r in ranks]


def _same(a, b):
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"


def test_ptq_across_ranks_is_bitwise_the_single_process(quantized):
    single, ranks = quantized
    _same(ranks[0]["ptq"], single["ptq"])
    _same(ranks[1]["ptq"], single["ptq"])


def test_shard_deals_one_dataset_to_the_ranks(quantized, tmp_path):
    single, _ = quantized
    ranks, _ = launch("sharded", tmp_path)
    for r in ranks:
        assert r is not None and "ok" in r, r and r.get("trace")
        _same(r["ok"]["ptq"], single["ptq"])  # the incomplete last round (an outlier batch) was dropped


@pytest.mark.parametrize("kind", ["mp", "mp_probed"])  # measured (split by node), estimated (split by batch)
def test_mixed_precision_across_ranks_chooses_as_one_process(quantized, kind):
    single, ranks = quantized
    assert ranks[0][f"{kind}_choice"] == ranks[1][f"{kind}_choice"] == single[f"{kind}_choice"]
    assert len(set(single[f"{kind}_choice"])) > 1  # a real choice was made (not every node at one width)
    _same(ranks[0][kind], single[kind])
    _same(ranks[1][kind], single[kind])


def test_gptq_across_ranks_is_identical_on_every_rank_and_close_to_one_process(quantized):
    single, ranks = quantized
    _same(ranks[0]["gptq"], ranks[1]["gptq"])
    assert ranks[0]["gptq_losses"] == ranks[1]["gptq_losses"]  # the global batch's loss, on both
    # same global batches, another order of float sums (and each rank shuffles its own samples)
    assert len(ranks[0]["gptq_losses"]) == len(single["gptq_losses"])
    np.testing.assert_allclose(ranks[0]["gptq_losses"], single["gptq_losses"], rtol=0.02)
    a, b = single["gptq_outputs"], ranks[0]["gptq_outputs"]
    sqnr = 10 * torch.log10((a ** 2).sum() / ((a - b) ** 2).sum().clamp_min(1e-30))
    assert sqnr > 30, f"{sqnr:.1f} dB between the single-process and the two-rank GPTQ models"


def test_a_real_model_across_ranks_is_bitwise_one_process(tmp_path, single_thread):
    real_models = pytest.importorskip("benchmarks.real_models")
    pytest.importorskip("skimage.data")
    if not (real_models.REAL / real_models.MTCNN_DIR).exists():
        pytest.skip("facenet-pytorch's MTCNN weights are not in .cache/assets/real (bash scripts/setup.sh fetches them)")
    ranks, _ = launch("real_model", tmp_path)
    for r in ranks:
        assert r is not None and "ok" in r, r and r.get("trace")
    single = workers.real_model(0, 1)
    assert single["batches"] >= 4
    for r in ranks:
        _same(r["ok"]["ptq"], single["ptq"])
        assert r["ok"]["mp_choice"] == single["mp_choice"] and len(set(single["mp_choice"])) > 1
        _same(r["ok"]["mp"], single["mp"])


def test_qat_trains_under_ddp_and_fsdp(tmp_path, single_thread):
    ranks, _ = launch("qat", tmp_path)
    for r in ranks:
        assert r is not None and "ok" in r, r and r.get("trace")
    single = workers.qat(0, 1)["none"]
    r0, r1 = ranks[0]["ok"], ranks[1]["ok"]
    for wrap in ("ddp", "fsdp"):
        assert torch.equal(r0[wrap], r1[wrap]), f"{wrap}: the finalized models differ between the ranks"
        torch.testing.assert_close(r0[wrap], single, rtol=1e-3, atol=1e-4)
    assert "sharded" in r0["fsdp_refusal"] and "full_state_dict" in r0["fsdp_refusal"]


@pytest.mark.parametrize("scenario, on_rank_0, on_rank_1", [
    ("different_model", "rank(s) [1] have another model", "rank(s) [1] have another model"),
    ("short_data", "rank(s) [1] ended after 1 batches", "rank(s) [1] ended after 1 batches"),
    ("failing_rank", "rank 1 failed (RepresentativeDataError", "NaN"),
])
def test_bad_set_ups_stop_every_rank_with_a_message(tmp_path, scenario, on_rank_0, on_rank_1):
    ranks, codes = launch(scenario, tmp_path, timeout_s=120)
    assert codes == [0, 0]
    assert ranks[0]["type"] == "DistributedError" and on_rank_0 in ranks[0]["error"], ranks[0]
    assert on_rank_1 in ranks[1]["error"], ranks[1]


def test_a_killed_rank_stops_the_others_within_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("HWQUANT_DISTRIBUTED_TIMEOUT", "20")
    start = time.time()
    ranks, codes = launch("killed_rank", tmp_path, timeout_s=120)
    assert codes[1] == 3 and ranks[1] is None
    assert ranks[0]["type"] == "DistributedError", ranks[0]
    assert "no answer from the other ranks" in ranks[0]["error"] and "HWQUANT_DISTRIBUTED_TIMEOUT" in ranks[0]["error"]
    assert time.time() - start < 110


# ------------------------------------------------------------------------- the framework-free part
def test_statistics_added_in_global_order_equal_one_pass():
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(4, 3, 300, 300)).astype(np.float32) for _ in range(4)]  # subsampled: 1.08 M values
    one = TensorStatistics(per_channel=True)
    for b in batches:
        one.update(b)
    # what two ranks compute: each summarises its batches for their global index; all add in global order
    merged = TensorStatistics(per_channel=True)
    summaries = {}
    for rank in range(2):
        for k, b in enumerate(batches[rank::2]):
            index = k * 2 + rank
            view = TensorStatistics(per_channel=True)
            view.batches = index  # the subsample is drawn for the global index
            summaries[index] = summarize(b, view)
    for index in sorted(summaries):
        merged.add(summaries[index])
    assert (merged.histogram()[1] == one.histogram()[1]).all()
    assert (merged.min, merged.max, merged.mean, merged.std) == (one.min, one.max, one.mean, one.std)


class _ThreadRanks(Collective):
    """Ranks as threads of this process: exchange is an all-gather through shared slots and a barrier."""

    def __init__(self, rank, world, slots, barrier):
        self.rank, self.world_size, self.slots, self.barrier = rank, world, slots, barrier

    def _all_gather(self, payload, what):
        self.slots[self.rank] = copy.deepcopy(payload)
        self.barrier.wait(timeout=60)
        out = list(self.slots)
        self.barrier.wait(timeout=60)
        return out


def _adding_pass(stats, data):
    """What a framework's pass does: summarise each batch (drawing its subsample), then add it."""
    n = 0
    for (x,) in data:
        stats["t"].add(summarize(x, stats["t"]))
        n += 1
    return n


def test_statistics_pass_of_threaded_ranks_is_bitwise_one_pass():
    rng = np.random.default_rng(0)
    # growing ranges (the window slides and its bins merge) and subsampled batches (600 k values each)
    batches = [(rng.normal(size=(2, 3, 316, 316)) * (1 + k)).astype(np.float32) for k in range(6)]
    one = {"t": TensorStatistics(per_channel=True)}
    assert statistics_pass(SINGLE_PROCESS, one, [[b] for b in batches], _adding_pass) == 6
    world, slots, barrier = 3, [None] * 3, threading.Barrier(3)
    results, errors = {}, []

    def rank(r):
        try:
            stats = {"t": TensorStatistics(per_channel=True)}
            n = statistics_pass(_ThreadRanks(r, world, slots, barrier), stats, [[b] for b in batches[r::world]],
                                _adding_pass)
            results[r] = (n, stats["t"])
        except Exception as e:  # pragma: no cover (reported below)
            errors.append(e)
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    t1 = one["t"]
    for r in range(world):
        n, t = results[r]
        assert n == 6
        assert (t.histogram()[0] == t1.histogram()[0]).all() and (t.histogram()[1] == t1.histogram()[1]).all()
        assert (t.min, t.max, t.mean, t.std) == (t1.min, t1.max, t1.mean, t1.std)
        assert (t.channel_mean == t1.channel_mean).all()


def test_one_process_takes_the_single_process_path():
    seen = []
    assert statistics_pass(SINGLE_PROCESS, {}, [1, 2], lambda stats, data: seen.extend(data) or 7) == 7
    assert seen == [1, 2]
    assert global_batches(SINGLE_PROCESS, [1, 2], "x") == [1, 2]


def test_shard_without_torch_distributed_returns_the_data():
    from hwquant.torch.distributed import shard
    gen = workers.gen(workers.global_batches())
    assert shard(gen) is gen


def test_bad_timeout_is_refused(monkeypatch):
    from hwquant.torch.distributed import timeout_seconds
    monkeypatch.setenv("HWQUANT_DISTRIBUTED_TIMEOUT", "soon")
    with pytest.raises(InvalidConfigError, match="HWQUANT_DISTRIBUTED_TIMEOUT"):
        timeout_seconds()


def test_the_documented_torchrun_recipe(tmp_path):
    """torchrun, DistributedSampler, PTQ, export: both ranks hold the same model, one file is written."""
    here = Path(__file__).parent
    out = tmp_path / "model.onnx"
    env = {**os.environ, "PYTHONPATH": f"{here}{os.pathsep}{here.parent}"}
    proc = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", "2",
                           "--master-port", str(_free_port()), str(here / "distributed_torchrun_job.py"), str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert len(lines) == 2 and lines[0].split()[-1] == lines[1].split()[-1], proc.stdout
    assert out.exists() and [p.name for p in tmp_path.iterdir()] == ["model.onnx"]  # one writer, no temporaries


def test_only_rank_0_writes_files(tmp_path, caplog):
    from hwquant import process_rank as ranks
    from hwquant.fileio import atomic_write
    previous = ranks._process_rank
    try:
        ranks.register_process_rank(lambda: 1)
        with caplog.at_level("INFO", logger="hwquant"):
            atomic_write(tmp_path / "model.onnx", b"rank 1's bytes")
        assert not (tmp_path / "model.onnx").exists() and list(tmp_path.iterdir()) == []
        assert "rank 1: " in caplog.text and "is written by rank 0" in caplog.text
        ranks.register_process_rank(lambda: 0)
        atomic_write(tmp_path / "model.onnx", b"rank 0's bytes")
        assert (tmp_path / "model.onnx").read_bytes() == b"rank 0's bytes"
    finally:
        ranks.register_process_rank(previous)


def test_a_batch_sliced_from_the_dataset_is_sent_alone():
    from hwquant.torch.distributed import _on_cpu
    dataset = torch.zeros(64, 3, 8, 8)
    sent = _on_cpu([dataset[:4], {"x": dataset[4:8]}, 3])
    assert sent[0].untyped_storage().nbytes() == 4 * 3 * 8 * 8 * 4 and sent[2] == 3
    assert sent[1]["x"].untyped_storage().nbytes() == 4 * 3 * 8 * 8 * 4
    whole = torch.zeros(4, 3)
    assert _on_cpu(whole) is not None and _on_cpu(whole).data_ptr() == whole.data_ptr()  # no needless copy
