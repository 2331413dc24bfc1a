"""The main job: quantize MobileNetV2 (real ImageNet weights) for the IMX500 and compare it with
the float model on images that ship in packages (calibration and evaluation images disjoint).

    bash scripts/setup.sh && bash scripts/fetch_assets.sh && .venv/bin/python examples/quantize_mobilenet_v2.py
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mct_quantizers  # noqa: E402

import hwquant as mct  # noqa: E402
from benchmarks.assets import calibration_and_eval_sets, imagenet_labelled  # noqa: E402
from benchmarks.metrics import labelled_top1, predict, sqnr_db, top1_agreement  # noqa: E402
from benchmarks.models import mobilenet_v2_pretrained  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=192, help="calibration crops")
    parser.add_argument("--evaluation", type=int, default=490, help="evaluation crops")
    parser.add_argument("--tpc-version", default="1.0", help="IMX500 TPC version (1.0, 4.0, 5.0, 6.0)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = mobilenet_v2_pretrained()
    calibration, evaluation = calibration_and_eval_sets(args.calibration, args.evaluation)
    labelled_x, labelled_y = imagenet_labelled()

    def representative_data_gen():
        for i in range(0, len(calibration), 32):
            yield [calibration[i:i + 32]]

    start = time.perf_counter()
    quantized, info = mct.ptq.pytorch_post_training_quantization(
        model, representative_data_gen,
        target_platform_capabilities=mct.get_target_platform_capabilities(args.tpc_version, "imx500"))
    seconds = time.perf_counter() - start

    float_logits, q_logits = predict(model, evaluation), predict(quantized, evaluation)
    # the quantized kernels at their bit widths (MCT's weights memory; biases stay float)
    kernel_bytes = sum(getattr(w, name).numel() * q.num_bits / 8 for w in quantized.modules()
                       if isinstance(w, mct_quantizers.PytorchQuantizationWrapper)
                       for name, q in w.weights_quantizers.items())
    print(f"MobileNetV2 (ImageNet weights), IMX500 TPC {args.tpc_version}, W8A8, "
          f"{len(calibration)} calibration / {len(evaluation)} evaluation crops")
    print(f"  quantization time          {seconds:8.1f} s")
    print(f"  top-1 agreement with float {100 * top1_agreement(float_logits, q_logits):8.1f} %")
    print(f"  output SQNR                {sqnr_db(float_logits, q_logits):8.1f} dB")
    print(f"  labelled top-1 (20 images) float {labelled_top1(predict(model, labelled_x), labelled_y)}/20, "
          f"quantized {labelled_top1(predict(quantized, labelled_x), labelled_y)}/20")
    print(f"  weights memory             {kernel_bytes / 1e6:8.2f} MB (float: "
          f"{sum(p.numel() for p in model.parameters()) * 4 / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
