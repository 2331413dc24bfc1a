"""MCT 2.6.1's Keras GPTQ and QAT for benchmarks/run_keras_training.py. Runs in .venv-mct-keras
(TensorFlow 2.15, Keras 2: MCT's Keras path needs TF <= 2.15):

    .venv-mct-keras/bin/python benchmarks/peer_mct_keras_training.py --mode gptq --bits 4 --epochs 2 --data in.npz --out out.npz

`in.npz` holds the Keras layer weights by name (`w:<layer>:<k>`) and the images (NHWC); `out.npz` gets
the float and quantized logits and the call's seconds (QAT: the accuracies and seconds per epoch).
MobileNetV2 is built as benchmarks/peer_mct_keras.py builds it; every kernel gets --bits through MCT's
BitWidthConfig (the IMX500 1.0 TPC offers 8, 4 and 2-bit kernels).
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.keras_models import set_weights_by_name, torchvision_mobilenet_v2_config, w4a4_core_config  # noqa: E402
from benchmarks.peer_mct_keras import _point_inbound_to  # noqa: E402


def kernel_bits_config(mct, tf, bits: int):
    nf = mct.core.network_editor.NodeTypeFilter
    bw = mct.core.BitWidthConfig()
    bw.set_manual_weights_bit_width([nf(tf.keras.layers.Conv2D), nf(tf.keras.layers.DepthwiseConv2D),
                                     nf(tf.keras.layers.Dense)], bits, ["kernel", "depthwise_kernel", "kernel"])
    return mct.core.CoreConfig(bit_width_config=bw)


def predict(model, x, batch=64):
    return np.concatenate([model.predict_on_batch(x[i:i + batch]) for i in range(0, len(x), batch)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["gptq", "qat"], required=True)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--w4a4", action="store_true")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bits", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--no-hessian", action="store_true")
    args = ap.parse_args()
    import model_compression_toolkit as mct
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(2)
    data = np.load(args.data)
    tpc = mct.get_target_platform_capabilities("1.0", "imx500")
    if args.mode == "qat":
        return qat(mct, tf, args, data, tpc)
    model = tf.keras.Model.from_config(torchvision_mobilenet_v2_config(tf.keras, _point_inbound_to))
    set_weights_by_name(model, data)
    calib, evaluation = data["calib"], data["eval"]

    def gen():
        for i in range(0, len(calib), 32):
            yield [calib[i:i + 32]]
    core = kernel_bits_config(mct, tf, args.bits) if args.bits != 8 else mct.core.CoreConfig()
    hessian = {"use_hessian_based_weights": False, "use_hessian_sample_attention": False} if args.no_hessian else {}
    cfg = mct.gptq.get_keras_gptq_config(n_epochs=args.epochs, **hessian)
    start = time.perf_counter()
    quantized, _ = mct.gptq.keras_gradient_post_training_quantization(model, gen, cfg, core_config=core,
                                                                      target_platform_capabilities=tpc)
    seconds = time.perf_counter() - start
    np.savez(args.out, float_logits=predict(model, evaluation), quantized_logits=predict(quantized, evaluation),
             seconds=seconds)


def qat(mct, tf, args, data, tpc):
    """QAT init on the calibration images, ``fit`` on the training images, finalize; test accuracy."""
    from benchmarks.keras_models import keras_fashion_model
    state = {k[3:]: data[k] for k in data.files if k.startswith("sd:")}
    model = keras_fashion_model(args.model, state)
    calib, train_x, train_y = data["calib"], data["train_x"], data["train_y"]
    core = w4a4_core_config(mct, tf.keras.layers, model) if args.w4a4 else mct.core.CoreConfig()
    start = time.perf_counter()
    qat_model, _, _ = mct.qat.keras_quantization_aware_training_init_experimental(
        model, lambda: ([calib[i:i + 64]] for i in range(0, len(calib), 64)), core_config=core,
        target_platform_capabilities=tpc)
    init_seconds = time.perf_counter() - start
    test_x, test_y = data["test_x"], data["test_y"]
    init_accuracy = float((predict(qat_model, test_x, 1000).argmax(1) == test_y).mean())
    qat_model.compile(optimizer=tf.keras.optimizers.Adam(1e-4),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = []  # each epoch's seconds: the fastest is the steady state (the first also traces the step)

    class Clock(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            epochs.append(time.perf_counter() - self.start)
    qat_model.fit(train_x, train_y, epochs=args.epochs, batch_size=128, verbose=0, shuffle=False, callbacks=[Clock()])
    epoch_seconds, first_epoch_seconds = min(epochs), epochs[0]
    final = mct.qat.keras_quantization_aware_training_finalize_experimental(qat_model)
    np.savez(args.out, accuracy=float((predict(final, test_x, 1000).argmax(1) == test_y).mean()), init_accuracy=init_accuracy,
             float_accuracy=float((predict(model, test_x, 1000).argmax(1) == test_y).mean()),
             init_seconds=init_seconds, epoch_seconds=epoch_seconds,
             first_epoch_seconds=first_epoch_seconds)


if __name__ == "__main__":
    main()
