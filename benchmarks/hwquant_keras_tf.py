"""hwquant's Keras PTQ of MobileNetV2 on Keras' TensorFlow backend, for benchmarks/run_keras.py. Runs in
.venv-tf (scripts/test_keras_tensorflow.sh makes it: TensorFlow, no torch):

    .venv-tf/bin/python benchmarks/hwquant_keras_tf.py --data in.npz --out out.npz

`in.npz` as for benchmarks/peer_mct_keras.py (weights by layer name, calibration and evaluation images).
"""
import argparse
import os
import sys
import time
from pathlib import Path

os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import tensorflow as tf

    import hwquant as mct
    from benchmarks.keras_models import keras_mobilenet_v2_architecture

    tf.config.threading.set_intra_op_parallelism_threads(2)
    data = np.load(args.data)
    model = keras_mobilenet_v2_architecture()
    for layer in model.layers:
        keys = sorted((k for k in data.files if k.startswith(f"w:{layer.name}:")), key=lambda k: int(k.rsplit(":", 1)[1]))
        if keys:
            layer.set_weights([data[k] for k in keys])
    calib, evaluation = data["calib"], data["eval"]
    start = time.perf_counter()
    quantized, _ = mct.ptq.keras_post_training_quantization(
        model, lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32)))
    seconds = time.perf_counter() - start
    predict = lambda m: np.concatenate([m.predict_on_batch(evaluation[i:i + 64]) for i in range(0, len(evaluation), 64)])  # noqa: E731
    np.savez(args.out, float_logits=predict(model), quantized_logits=predict(quantized), seconds=seconds)


if __name__ == "__main__":
    main()
