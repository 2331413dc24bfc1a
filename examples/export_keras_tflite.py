"""Keras 3 on the TensorFlow backend: the models examples/quantize_keras.py saved (on any backend)
loaded here, the float ones quantized here too, each quantized model saved, loaded back and
exported as a fully integer TFLite file, run with ai-edge-litert: top-1 agreement with the simulated
quantized model, accuracy (Fashion-MNIST) or agreement with the float model (MobileNetV2), size and
latency at batch 1. The TensorFlow venv is the one the Keras tests run in:

    .venv/bin/python examples/quantize_keras.py --tpc tflite --save-dir keras_models
    bash scripts/setup_keras_tensorflow.sh && .venv-tf/bin/python examples/export_keras_tflite.py keras_models
"""
import argparse
import os
import sys
import time
from pathlib import Path

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hwquant as mct  # noqa: E402

KSF, QF = mct.exporter.KerasExportSerializationFormat, mct.exporter.QuantizationFormat


def _run(path: Path, images: np.ndarray):
    """(logits of every image, median seconds of one image) with ai-edge-litert at 2 threads."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=2)
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0]["index"], interpreter.get_output_details()[0]["index"]
    logits, times = [], []
    for i in range(len(images)):
        start = time.perf_counter()
        interpreter.set_tensor(inp, images[i:i + 1])
        interpreter.invoke()
        times.append(time.perf_counter() - start)
        logits.append(interpreter.get_tensor(out).copy())
    return np.concatenate(logits), float(np.median(times))


def _predict(model, x, batch=64):
    return np.concatenate([np.asarray(model.predict_on_batch(x[i:i + batch])) for i in range(0, len(x), batch)])


def _report(what: str, quantized, tflite: Path, data) -> None:
    logits, seconds = _run(tflite, data["images"])
    agree = lambda a, b: 100 * float((a.argmax(1) == b.argmax(1)).mean())  # noqa: E731
    line = (f"{what}: INT8 TFLite {tflite.stat().st_size / 1e6:.2f} MB, {1e3 * seconds:.2f} ms at batch 1; top-1 "
            f"agreement with the simulated model {agree(logits, _predict(quantized, data['images'])):.1f} %")
    if "labels" in data:
        line += (f", accuracy {100 * float((logits.argmax(1) == data['labels']).mean()):.2f} % "
                 f"(float {100 * float((data['float_logits'].argmax(1) == data['labels']).mean()):.2f} %)")
    else:
        line += f", with the float model {agree(logits, data['float_logits']):.1f} %"
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="the --save-dir of examples/quantize_keras.py")
    ap.add_argument("--tpc", default="tflite", choices=["imx500", "tflite"], help="for the quantization here")
    args = ap.parse_args()
    folder = Path(args.folder)
    saved = sorted(p for p in folder.glob("*.keras") if not p.name.endswith((".float.keras", ".tf.keras")))
    if not saved:
        sys.exit(f"no quantized .keras file in '{folder}': run examples/quantize_keras.py --save-dir {folder} first")
    tpc = mct.get_target_platform_capabilities("1.0", args.tpc)
    for path in saved:
        name, data = path.stem, np.load(path.with_suffix(".npz"))
        quantized = mct.keras_load_quantized_model(path)
        _report(f"{name:12s} saved by quantize_keras.py", quantized,
                mct.exporter.keras_export_model(quantized, folder / f"{name}.tflite", serialization_format=KSF.TFLITE,
                                                quantization_format=QF.INT8), data)
        calibration = data["calibration"]
        start = time.perf_counter()
        here, _ = mct.ptq.keras_post_training_quantization(
            keras.saving.load_model(folder / f"{name}.float.keras"),
            # the data generator is consumed within this iteration, so the loop variable cannot go stale
            lambda: ([calibration[i:i + 32]] for i in range(0, len(calibration), 32)),  # noqa: B023
            target_platform_capabilities=tpc)
        seconds = time.perf_counter() - start
        reloaded = mct.keras_load_quantized_model(mct.exporter.keras_export_model(here, folder / f"{name}.tf.keras"))
        _report(f"{name:12s} quantized here ({seconds:.1f} s)", reloaded,
                mct.exporter.keras_export_model(reloaded, folder / f"{name}.tf.tflite", serialization_format=KSF.TFLITE,
                                                quantization_format=QF.INT8), data)


if __name__ == "__main__":
    main()
