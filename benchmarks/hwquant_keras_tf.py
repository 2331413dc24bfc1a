"""hwquant's Keras PTQ of MobileNetV2 on Keras' TensorFlow backend, for benchmarks/run_keras.py. Runs in
.venv-tf (scripts/test_keras_tensorflow.sh makes it: TensorFlow, no torch):

    .venv-tf/bin/python benchmarks/hwquant_keras_tf.py --data in.npz --out out.npz

`in.npz` as for benchmarks/peer_mct_keras.py (weights by layer name, calibration and evaluation images).
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
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import tensorflow as tf

    import hwquant as mct
    from benchmarks.keras_models import keras_mobilenet_v2_architecture, quantize_and_save, set_weights_by_name

    tf.config.threading.set_intra_op_parallelism_threads(2)
    data = np.load(args.data)
    model = keras_mobilenet_v2_architecture()
    set_weights_by_name(model, data)
    quantize_and_save(model, lambda m, gen: mct.ptq.keras_post_training_quantization(m, gen)[0], data, args.out)


if __name__ == "__main__":
    main()
