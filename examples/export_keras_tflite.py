"""Keras 3 on the TensorFlow backend: load the quantized models that examples/quantize_keras.py saved
(on any backend), export each as a fully integer TFLite file and run it with ai-edge-litert: its
agreement with the simulated quantized model, accuracy (Fashion-MNIST) or top-1 agreement with the
float model (MobileNetV2), size and latency at batch 1. The TensorFlow venv is made by the script
that runs the Keras tests there:

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

import numpy as np  # noqa: E402

import hwquant as mct  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="the --save-dir of examples/quantize_keras.py")
    args = ap.parse_args()
    folder = Path(args.folder)
    saved = sorted(folder.glob("*.keras"))
    if not saved:
        sys.exit(f"no .keras file in '{folder}': run examples/quantize_keras.py --save-dir {folder} first")
    KSF, QF = mct.exporter.KerasExportSerializationFormat, mct.exporter.QuantizationFormat
    for path in saved:
        data = np.load(path.with_suffix(".npz"))
        quantized = mct.keras_load_quantized_model(path)
        tflite = mct.exporter.keras_export_model(quantized, path.with_suffix(".tflite"), serialization_format=KSF.TFLITE,
                                                 quantization_format=QF.INT8)
        logits, seconds = _run(tflite, data["images"])
        agree = lambda a, b: 100 * float((a.argmax(1) == b.argmax(1)).mean())  # noqa: E731
        line = (f"{path.stem:12s} INT8 TFLite {tflite.stat().st_size / 1e6:.2f} MB, {1e3 * seconds:.2f} ms at batch 1; "
                f"top-1 agreement with the simulated model {agree(logits, data['quantized_logits']):.1f} %")
        if "labels" in data:
            line += (f", accuracy {100 * float((logits.argmax(1) == data['labels']).mean()):.2f} % "
                     f"(float {100 * float((data['float_logits'].argmax(1) == data['labels']).mean()):.2f} %)")
        else:
            line += f", with the float model {agree(logits, data['float_logits']):.1f} %"
        print(line, flush=True)


if __name__ == "__main__":
    main()
