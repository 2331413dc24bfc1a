"""A finalized Keras QAT model (a .keras file saved on Keras' torch backend) exported as INT8 TFLite on the
TensorFlow backend, for benchmarks/run_keras_training.py. Runs in .venv-tf:

    .venv-tf/bin/python benchmarks/keras_qat_tflite.py --model final.keras --data in.npz --dir DIR

Writes DIR/qat_int8.tflite, DIR/float.tflite (the float MobileNetV2 of the weights in in.npz) and
DIR/parity.npz: the worst layer's distance, in steps, from the simulation fed the file's own inputs (first
evaluation image), and how many layers were compared.
"""
import argparse
import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--dir", required=True)
    args = ap.parse_args()
    import keras
    import tensorflow as tf

    import hwquant as mct
    from benchmarks.keras_models import float_tflite, keras_mobilenet_v2_architecture, set_weights_by_name
    from hwquant.keras.tflite_int8 import layer_parity

    tf.config.threading.set_intra_op_parallelism_threads(2)
    data, folder = np.load(args.data), Path(args.dir)
    model = keras_mobilenet_v2_architecture()
    set_weights_by_name(model, data)
    float_tflite(keras, model, str(folder / "float.tflite"))
    final = mct.keras_load_quantized_model(args.model, compile=False)  # (saved compiled on the torch backend)
    path = mct.exporter.keras_export_model(final, folder / "qat_int8.tflite",
                                           serialization_format=mct.exporter.KerasExportSerializationFormat.TFLITE,
                                           quantization_format=mct.exporter.QuantizationFormat.INT8)
    steps = [v for v in layer_parity(final, path.read_bytes(), data["eval"][:1]).values() if not np.isnan(v)]
    np.savez(folder / "parity.npz", steps=max(steps), layers=len(steps))


if __name__ == "__main__":
    main()
