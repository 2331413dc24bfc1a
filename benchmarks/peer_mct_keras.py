"""MCT 2.6.1's Keras PTQ on MobileNetV2 with torchvision's weights, for benchmarks/run_keras.py.
Runs in .venv-mct-keras (TensorFlow 2.15, Keras 2: MCT's Keras path needs TF <= 2.15):

    .venv-mct-keras/bin/python benchmarks/peer_mct_keras.py --data in.npz --out out.npz

`in.npz` holds the Keras layer weights by name (`w:<layer>:<k>`), the calibration and evaluation
images (NHWC); `out.npz` gets the float and quantized logits and the quantization time. The tf.keras
MobileNetV2's config is edited as benchmarks/keras_models.py edits the Keras 3 one (torchvision's
padding, batch-norm epsilon 1e-5), in Keras 2's config format.
"""
import argparse
import copy
import time

import numpy as np


def mobilenet_v2(tf):
    base = tf.keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3), classes=1000,
                                             classifier_activation=None)
    config = copy.deepcopy(base.get_config())
    layers = config["layers"]
    for layer in layers:
        if layer["class_name"] == "BatchNormalization":
            layer["config"]["epsilon"] = 1e-5
        if layer["class_name"] == "ZeroPadding2D":
            layer["config"]["padding"] = ((1, 1), (1, 1))
    stem = next(i for i, layer in enumerate(layers) if layer["name"] == "Conv1")
    layers[stem]["config"]["padding"] = "valid"
    pad = {"class_name": "ZeroPadding2D", "name": "Conv1_pad",
           "config": {"name": "Conv1_pad", "trainable": True, "dtype": "float32", "padding": ((1, 1), (1, 1)),
                      "data_format": "channels_last"},
           "inbound_nodes": copy.deepcopy(layers[stem]["inbound_nodes"])}
    layers.insert(stem, pad)
    layers[stem + 1]["inbound_nodes"] = [[["Conv1_pad", 0, 0, {}]]]
    return tf.keras.Model.from_config(config)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import tensorflow as tf
    import model_compression_toolkit as mct

    tf.config.threading.set_intra_op_parallelism_threads(2)
    data = np.load(args.data)
    model = mobilenet_v2(tf)
    for layer in model.layers:
        keys = sorted((k for k in data.files if k.startswith(f"w:{layer.name}:")), key=lambda k: int(k.rsplit(":", 1)[1]))
        if keys:
            layer.set_weights([data[k] for k in keys])
    calib, evaluation = data["calib"], data["eval"]
    gen = lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32))  # noqa: E731
    start = time.perf_counter()
    quantized, _ = mct.ptq.keras_post_training_quantization(
        model, gen, target_platform_capabilities=mct.get_target_platform_capabilities("1.0", "imx500"))
    seconds = time.perf_counter() - start
    predict = lambda m: np.concatenate([m.predict_on_batch(evaluation[i:i + 64]) for i in range(0, len(evaluation), 64)])  # noqa: E731
    np.savez(args.out, float_logits=predict(model), quantized_logits=predict(quantized), seconds=seconds)


if __name__ == "__main__":
    main()
