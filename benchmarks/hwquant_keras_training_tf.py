"""hwquant's Keras QAT on Keras' TensorFlow backend, for benchmarks/run_keras_training.py (--parts qat-fashion):
the steps MCT's peer takes (benchmarks/peer_mct_keras_training.py's ``qat``: init on the calibration images,
``fit``, finalize, test accuracy), with hwquant in MCT's place (the same API). Runs in .venv-tf (TensorFlow,
no torch: scripts/setup_keras_tensorflow.sh):

    .venv-tf/bin/python benchmarks/hwquant_keras_training_tf.py --model plain_cnn [--w4a4] --data in.npz --out out.npz

`in.npz` / `out.npz` as for the peer's --mode qat.
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
    ap.add_argument("--w4a4", action="store_true")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import tensorflow as tf

    import hwquant as mct
    from benchmarks.peer_mct_keras_training import qat

    tf.config.threading.set_intra_op_parallelism_threads(2)  # (as the peer)
    qat(mct, tf, args, np.load(args.data), mct.get_target_platform_capabilities("1.0", "imx500"))


if __name__ == "__main__":
    main()
