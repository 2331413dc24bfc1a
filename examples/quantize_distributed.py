"""Quantize MobileNetV2 (real ImageNet weights) for the IMX500 across processes: each rank calibrates on
its share of the images, every rank ends with the same model, and rank 0 writes the ONNX file.

    bash scripts/setup.sh && bash scripts/fetch_assets.sh
    .venv/bin/torchrun --nproc-per-node 2 examples/quantize_distributed.py --out mobilenet_v2_imx500.onnx

On GPUs (one per rank) the same command uses NCCL. docs/guide/distributed.md explains each step.
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hwquant as mct  # noqa: E402
from benchmarks.assets import calibration_and_eval_sets  # noqa: E402
from benchmarks.metrics import predict, sqnr_db, top1_agreement  # noqa: E402
from benchmarks.models import mobilenet_v2_pretrained  # noqa: E402
from hwquant.torch.distributed import shard  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=192, help="calibration crops (all ranks together)")
    parser.add_argument("--evaluation", type=int, default=64, help="evaluation crops")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", default="mobilenet_v2_imx500_distributed.onnx")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(max(1, torch.get_num_threads() // world))  # the ranks share the cores

    model = mobilenet_v2_pretrained().to(device).eval()  # the same weights on every rank
    calibration, evaluation = calibration_and_eval_sets(args.calibration, args.evaluation)
    images = calibration.to(device)  # (n, 3, 224, 224), ImageNet-normalised

    def every_batch():  # the whole dataset: shard() deals batch i to rank i % world
        for i in range(0, len(images), args.batch_size):
            yield [images[i:i + args.batch_size]]

    tpc = mct.get_target_platform_capabilities(tpc_version="4.0", device_type="imx500")
    quantized, _ = mct.ptq.pytorch_post_training_quantization(model, shard(every_batch),
                                                              target_platform_capabilities=tpc)
    mct.exporter.pytorch_export_model(quantized, args.out, shard(every_batch))  # rank 0 writes
    if rank == 0:
        held_out = evaluation
        reference, ours = predict(model.cpu(), held_out), predict(quantized.cpu(), held_out)
        print(f"{world} ranks: output SQNR {sqnr_db(reference, ours):.1f} dB, top-1 agreement "
              f"{100 * top1_agreement(reference, ours):.1f} % on {len(held_out)} held-out crops; wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
