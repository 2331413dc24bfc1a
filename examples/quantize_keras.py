"""Keras 3: quantize the Fashion-MNIST CNNs and MobileNetV2 as Keras models (their PyTorch weights
converted, benchmarks/keras_models.py), save, reload and export them, and print float vs quantized
figures. Runs on the Keras backend of KERAS_BACKEND (torch by default here).

    bash scripts/setup.sh && bash scripts/fetch_assets.sh && .venv/bin/python examples/quantize_keras.py

--save-dir DIR keeps each quantized model (`<name>.keras`), its float model (`<name>.float.keras`) and
its calibration and evaluation data (`<name>.npz`) for examples/export_keras_tflite.py, which loads
them on the TensorFlow backend, quantizes the float models there too, and writes and runs INT8 TFLite
files; --tpc tflite quantizes for that runtime (TFLite 1.0 TPC instead of IMX500 1.0).
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import hwquant as mct  # noqa: E402
from benchmarks.assets import calibration_and_eval_sets, fashion_mnist, mobilenet_v2_weights_path  # noqa: E402
from benchmarks.keras_models import keras_fashion_model, keras_mobilenet_v2_from_torch  # noqa: E402
from benchmarks.models import trained_fashion_model  # noqa: E402


def _predict(model, x, batch=256):
    return np.concatenate([np.asarray(model.predict_on_batch(x[i:i + batch])) for i in range(0, len(x), batch)])


def _round_trip(quantized, folder):
    path = mct.exporter.keras_export_model(quantized, Path(folder) / f"{quantized.name}.keras")
    return mct.keras_load_quantized_model(path)


def _keep(folder: Path, name: str, model, quantized, calibration: np.ndarray, images: np.ndarray,
          float_logits: np.ndarray, labels) -> None:
    mct.exporter.keras_export_model(quantized, folder / f"{name}.keras")
    model.save(folder / f"{name}.float.keras")
    np.savez(folder / f"{name}.npz", calibration=calibration, images=images, float_logits=float_logits,
             quantized_logits=_predict(quantized, images, 64), **({} if labels is None else {"labels": labels}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save-dir", help="keep the quantized models and their evaluation data there")
    ap.add_argument("--tpc", default="imx500", choices=["imx500", "tflite"])
    args = ap.parse_args()
    tpc = mct.get_target_platform_capabilities("1.0", args.tpc)
    keep = Path(args.save_dir) if args.save_dir else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    train_x, _, test_x, test_y = fashion_mnist()
    calibration = train_x[:512].permute(0, 2, 3, 1).numpy()
    test_x, test_y = test_x.permute(0, 2, 3, 1).numpy(), test_y.numpy()
    gen = lambda: ([calibration[i:i + 64]] for i in range(0, len(calibration), 64))  # noqa: E731
    with tempfile.TemporaryDirectory() as folder:
        for name in ("plain_cnn", "mobile_cnn"):
            model = keras_fashion_model(name, trained_fashion_model(name, verbose=False).state_dict())
            start = time.perf_counter()
            quantized, _ = mct.ptq.keras_post_training_quantization(model, gen, target_platform_capabilities=tpc)
            seconds = time.perf_counter() - start
            reloaded = _round_trip(quantized, folder)
            acc = lambda m: 100 * (_predict(m, test_x).argmax(1) == test_y).mean()  # noqa: E731
            print(f"Keras ({keras.backend.backend()}) Fashion-MNIST {name:10s}: float {acc(model):.2f} %, "
                  f"W8A8 {acc(quantized):.2f} % ({seconds:.1f} s), saved and reloaded {acc(reloaded):.2f} %")
            if keep:
                _keep(keep, name, model, quantized, calibration, test_x, _predict(model, test_x), test_y)
        model = keras_mobilenet_v2_from_torch(torch.load(mobilenet_v2_weights_path(), weights_only=True))
        calib, evaluation = (t.permute(0, 2, 3, 1).numpy() for t in calibration_and_eval_sets(192, 490)[:2])
        start = time.perf_counter()
        quantized, _ = mct.ptq.keras_post_training_quantization(
            model, lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32)), target_platform_capabilities=tpc)
        seconds = time.perf_counter() - start
        f, q = _predict(model, evaluation, 64), _predict(_round_trip(quantized, folder), evaluation, 64)
        agreement = 100 * (f.argmax(1) == q.argmax(1)).mean()
        print(f"Keras ({keras.backend.backend()}) MobileNetV2: top-1 agreement {agreement:.1f} %, "
              f"SQNR {10 * np.log10((f ** 2).sum() / ((f - q) ** 2).sum()):.1f} dB ({seconds:.1f} s)")
        if keep:
            _keep(keep, "mobilenet_v2", model, quantized, calib, evaluation, f, None)


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    main()
