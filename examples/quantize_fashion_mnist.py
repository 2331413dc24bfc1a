"""Quantize two small Fashion-MNIST CNNs (a plain one, and a MobileNet-style one with depthwise
convolutions and residual adds) and compare labelled test accuracy with float. The models are
trained once, deterministically, and cached under .cache/models/.

    bash scripts/setup.sh && bash scripts/fetch_assets.sh && .venv/bin/python examples/quantize_fashion_mnist.py
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hwquant as mct  # noqa: E402
from benchmarks.assets import fashion_mnist  # noqa: E402
from benchmarks.metrics import accuracy  # noqa: E402
from benchmarks.models import trained_fashion_model  # noqa: E402


def main() -> None:
    train_x, _, test_x, test_y = fashion_mnist()
    calibration = train_x[:512]

    def representative_data_gen():
        for i in range(0, len(calibration), 64):
            yield [calibration[i:i + 64]]

    for name in ("plain_cnn", "mobile_cnn"):
        model = trained_fashion_model(name)
        start = time.perf_counter()
        quantized, _ = mct.ptq.pytorch_post_training_quantization(model, representative_data_gen)
        seconds = time.perf_counter() - start
        print(f"Fashion-MNIST {name:10s}: float {100 * accuracy(model, test_x, test_y):.2f} %, "
              f"W8A8 {100 * accuracy(quantized, test_x, test_y):.2f} % ({seconds:.1f} s)")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
