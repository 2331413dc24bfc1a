"""What each process of tests/test_distributed.py runs (a module of its own: spawned processes import it).

``scenario(rank, world)`` quantizes and returns what the test compares; ``world == 1`` is the single
process reading every rank's data in global order (local batch k of rank r is global batch k * world + r).
"""
from __future__ import annotations

import os
import traceback
from datetime import timedelta
from typing import Any, Dict, List

import torch
from distributed_exit import exit_rank
from torch import nn

WORLD = 2
N_BATCHES = 4   # global batches
BATCH = 4
SIZE = 32


def model() -> nn.Module:
    from benchmarks.models import MobileNetV2
    torch.manual_seed(0)
    m = MobileNetV2(num_classes=10, width_mult=0.35, dropout=0.0)  # (no random masks in training)
    with torch.no_grad():  # batch-norm statistics of a trained net (a fresh one's are 0 / 1)
        for bn in m.modules():
            if isinstance(bn, nn.BatchNorm2d):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)
    return m.eval()


def global_batches() -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(BATCH, 3, SIZE, SIZE, generator=g) for _ in range(N_BATCHES)]


def labels() -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return [torch.randint(0, 10, (BATCH,), generator=g) for _ in range(N_BATCHES)]


def local(batches: List[Any], rank: int, world: int) -> List[Any]:
    return batches[rank::world]


def gen(batches: List[torch.Tensor]):
    return lambda: iter([[b] for b in batches])


def state(m: nn.Module) -> Dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def outputs(m: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([m(b) for b in global_batches()])


# ------------------------------------------------------------------------------------------ scenarios
def quantize(rank: int, world: int) -> Dict[str, Any]:
    """PTQ, mixed precision (measured sensitivity, split by node) and GPTQ."""
    import hwquant as mct
    data = local(global_batches(), rank, world)
    out: Dict[str, Any] = {}
    q, _ = mct.ptq.pytorch_post_training_quantization(model(), gen(data))
    out["ptq"] = state(q)

    ru = mct.core.pytorch_resource_utilization_data(model(), gen(data))
    target = mct.core.ResourceUtilization(weights_memory=ru.weights_memory * 0.6)
    mp_cfg = mct.core.MixedPrecisionQuantizationConfig(
        num_of_images=2 * BATCH, distance_weighting_method=mct.core.MpDistanceWeighting.EXP)  # (measured)
    q, info = mct.ptq.pytorch_post_training_quantization(model(), gen(data), target_resource_utilization=target,
                                                         core_config=mct.core.CoreConfig(mixed_precision_config=mp_cfg))
    out["mp"], out["mp_choice"] = state(q), list(info.mixed_precision_cfg)
    probed = mct.core.MixedPrecisionQuantizationConfig(num_of_images=3 * BATCH)  # (the default: probe estimate)
    q, info = mct.ptq.pytorch_post_training_quantization(model(), gen(data), target_resource_utilization=target,
                                                         core_config=mct.core.CoreConfig(mixed_precision_config=probed))
    out["mp_probed"], out["mp_probed_choice"] = state(q), list(info.mixed_precision_cfg)

    # GPTQ: the same global batch (each step, the ranks' batches together make the single process's)
    batches = global_batches()
    gptq_data = local(batches, rank, world) if world > 1 else [torch.cat(batches[k:k + WORLD])
                                                               for k in range(0, N_BATCHES, WORLD)]
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=2)
    q, info = mct.gptq.pytorch_gradient_post_training_quantization(model(), gen(data), gptq_config=cfg,
                                                                   gptq_representative_data_gen=gen(gptq_data))
    out["gptq"], out["gptq_losses"], out["gptq_outputs"] = state(q), info.gptq_info_dict["losses"], outputs(q)
    return out


def real_model(rank: int, world: int) -> Dict[str, Any]:
    """MTCNN's O-Net (facenet-pytorch's trained weights, three outputs) on the face candidates its own
    cascade proposes in scikit-image's photographs: PTQ and mixed precision, batches dealt round robin."""
    import hwquant as mct
    from benchmarks import real_models
    from test_real_models_quick import _candidate_crops  # (tests/: the crops of the quick fidelity check)
    crops = _candidate_crops(48)
    batches = [crops[i:i + 16].clone() for i in range(0, len(crops) - 15, 16)]
    batches = batches[:len(batches) - len(batches) % WORLD]
    data = local(batches, rank, world)

    def net():
        return real_models._mtcnn_net(real_models.ONet, "onet.pt")
    q, _ = mct.ptq.pytorch_post_training_quantization(net(), gen(data))
    ru = mct.core.pytorch_resource_utilization_data(net(), gen(data))
    target = mct.core.ResourceUtilization(weights_memory=ru.weights_memory * 0.7)
    q_mp, info = mct.ptq.pytorch_post_training_quantization(net(), gen(data), target_resource_utilization=target)
    return {"ptq": state(q), "mp": state(q_mp), "mp_choice": list(info.mixed_precision_cfg), "batches": len(batches)}


def qat(rank: int, world: int) -> Dict[str, Any]:
    """QAT trained under DDP and under FSDP (fully_shard), then finalized: the same global batches."""
    import copy

    import hwquant as mct
    xs, ys = global_batches(), labels()
    out: Dict[str, Any] = {}
    for wrap in ("ddp", "fsdp") if world > 1 else ("none",):
        qat_model, _ = mct.qat.pytorch_quantization_aware_training_init_experimental(
            model(), gen(local(xs, rank, world)))
        skeleton = copy.deepcopy(qat_model)
        trained: nn.Module = qat_model
        if wrap == "ddp":
            trained = nn.parallel.DistributedDataParallel(qat_model)
        elif wrap == "fsdp":
            from torch.distributed.fsdp import fully_shard
            trained = fully_shard(qat_model)
        opt = torch.optim.SGD(trained.parameters(), lr=0.05)
        trained.train()
        for step in range(N_BATCHES // WORLD):
            if world > 1:
                x, y = xs[step * WORLD + rank], ys[step * WORLD + rank]
            else:
                x, y = torch.cat(xs[step * WORLD:(step + 1) * WORLD]), torch.cat(ys[step * WORLD:(step + 1) * WORLD])
            loss = nn.functional.cross_entropy(trained(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if wrap == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
            try:
                mct.qat.pytorch_quantization_aware_training_finalize_experimental(qat_model)
            except ValueError as e:
                out["fsdp_refusal"] = str(e)
            skeleton.load_state_dict(get_model_state_dict(qat_model, options=StateDictOptions(full_state_dict=True)))
            qat_model = skeleton
        final = mct.qat.pytorch_quantization_aware_training_finalize_experimental(qat_model)
        out[wrap] = outputs(final)
    return out


def sharded(rank: int, world: int) -> Dict[str, Any]:
    """Every rank reads the whole dataset (plus one batch, an incomplete last round) through shard()."""
    import hwquant as mct
    from hwquant.torch.distributed import shard
    batches = global_batches() + [torch.ones(BATCH, 3, SIZE, SIZE) * 50]  # dropped: would move every threshold
    q, _ = mct.ptq.pytorch_post_training_quantization(model(), shard(gen(batches)))
    return {"ptq": state(q)}


def different_model(rank: int, world: int) -> Dict[str, Any]:
    import hwquant as mct
    m = model()
    if rank == 1:
        with torch.no_grad():
            m.classifier[1].bias += 1e-3  # another checkpoint on rank 1
    mct.ptq.pytorch_post_training_quantization(m, gen(local(global_batches(), rank, world)))
    return {}


def short_data(rank: int, world: int) -> Dict[str, Any]:
    import hwquant as mct
    data = local(global_batches(), rank, world)
    mct.ptq.pytorch_post_training_quantization(model(), gen(data[:1] if rank == 1 else data))
    return {}


def failing_rank(rank: int, world: int) -> Dict[str, Any]:
    import hwquant as mct
    data = local(global_batches(), rank, world)
    if rank == 1:
        data = [data[0], torch.full_like(data[1], float("nan"))]  # its second batch is broken
    mct.ptq.pytorch_post_training_quantization(model(), gen(data))
    return {}


def killed_rank(rank: int, world: int) -> Dict[str, Any]:
    import hwquant as mct

    def data():
        for k, b in enumerate(local(global_batches(), rank, world)):
            if rank == 1 and k == 1:
                os._exit(3)  # killed (out of memory, preempted) in the middle of calibration
            yield [b]
    mct.ptq.pytorch_post_training_quantization(model(), data)
    return {}


SCENARIOS = {f.__name__: f for f in (quantize, real_model, qat, sharded, different_model, short_data, failing_rank, killed_rank)}


def worker(rank: int, world: int, port: int, scenario: str, folder: str) -> None:
    """One process: join the gloo group, run the scenario, save its result (or its error) for the test."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        result: Dict[str, Any] = {"ok": SCENARIOS[scenario](rank, world)}
    except Exception as e:  # the test reads every rank's error
        result = {"error": f"{type(e).__name__}: {e}", "type": type(e).__name__, "trace": traceback.format_exc()}
    torch.save(result, os.path.join(folder, f"{scenario}_{rank}.pt"))
    exit_rank()  # without gloo's teardown, which can race the other rank's exit and abort (tests/distributed_exit.py)
