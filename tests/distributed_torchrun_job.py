"""docs/guide/distributed.md's recipe as tests/test_distributed.py launches it: `torchrun --nproc-per-node 2`,
DistributedSampler over one dataset, PTQ, export (rank 0 writes), then a line per rank for the test."""
import hashlib
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import distributed_workers as workers  # tests/distributed_workers.py (the same model as the other tests)
from distributed_exit import exit_rank
import hwquant as mct

dist.init_process_group("gloo")
torch.set_num_threads(1)
rank = dist.get_rank()
dataset = TensorDataset(torch.cat(workers.global_batches()))
sampler = DistributedSampler(dataset, shuffle=False, drop_last=True)
loader = DataLoader(dataset, batch_size=workers.BATCH, sampler=sampler)


def representative_data_gen():
    for (images,) in loader:
        yield [images]


quantized, _ = mct.ptq.pytorch_post_training_quantization(workers.model(), representative_data_gen)
mct.exporter.pytorch_export_model(quantized, sys.argv[1], representative_data_gen)
digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in quantized.state_dict().values())).hexdigest()[:16]
print(f"rank {rank} model {digest}", flush=True)
# The recipe ends with dist.destroy_process_group(); the test's ranks leave without gloo's teardown, which can race
# the other rank's exit and abort after the work is done (tests/distributed_exit.py).
exit_rank()
