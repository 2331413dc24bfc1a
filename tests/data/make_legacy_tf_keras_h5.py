"""Writes tests/data/legacy_tf_keras_2_15.h5 and its reference outputs (legacy_tf_keras_2_15.npz): a small
face-detector-like model saved by tf.keras 2.15 in the legacy HDF5 format, with the layers whose tf.keras 2
configs Keras 3 rejects (SeparableConv2D, DepthwiseConv2D, Conv2DTranspose, SpatialDropout2D, GRU) beside
PReLU, batch norms, a residual add and layer names with hyphens (and dots on the layers without weights:
Keras 3 on its torch backend cannot hold the weights of a layer whose name has a dot). Random weights (seeded); the
batch norms get non-trivial statistics. Run in a TensorFlow 2.15 venv (benchmarks/setup_peers.sh makes
.venv-mct-keras):

    .venv-mct-keras/bin/python tests/data/make_legacy_tf_keras_h5.py
"""
from pathlib import Path

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent


def main() -> None:
    layers = tf.keras.layers
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((16, 16, 3), name="face.crop")
    x = layers.Conv2D(8, 3, padding="same", use_bias=False, name="stem-conv")(inp)
    x = layers.BatchNormalization(name="stem-bn")(x)
    x = layers.PReLU(shared_axes=[1, 2], name="stem-prelu")(x)
    y = layers.SeparableConv2D(8, 3, padding="same", name="block1-sep")(x)
    y = layers.BatchNormalization(name="block1-bn")(y)
    x = layers.Add(name="block1.add")([x, y])
    x = layers.SpatialDropout2D(0.1, name="block1-drop")(x)
    x = layers.MaxPooling2D(2, name="pool-1")(x)
    x = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, name="block2-dw")(x)
    x = layers.PReLU(shared_axes=[1, 2], name="block2-prelu")(x)
    up = layers.Conv2DTranspose(4, 3, strides=2, padding="same", name="mask-up")(x)
    mask = layers.Conv2D(1, 1, activation="sigmoid", name="mask-prob")(up)
    rows = layers.Reshape((8, 8 * 16), name="rows")(x)
    seq = layers.GRU(8, name="rows-gru")(rows)
    f = layers.MaxPooling2D(2, name="pool-2")(x)
    f = layers.Flatten(name="flat")(layers.Permute((2, 1, 3), name="permute")(f))
    h = layers.PReLU(name="fc-prelu")(layers.Dense(16, name="fc-1")(f))
    h = layers.Concatenate(name="fc.cat")([h, seq])
    box = layers.Dense(4, name="box-reg")(h)
    prob = layers.Dense(2, activation="softmax", name="face-prob")(h)
    model = tf.keras.Model(inp, [box, prob, mask], name="legacy-net")
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            n = layer.moving_mean.shape[0]
            layer.set_weights([rng.uniform(0.5, 1.5, n), rng.uniform(-0.2, 0.2, n), rng.uniform(-0.2, 0.2, n),
                               rng.uniform(0.5, 2.0, n)])
        elif isinstance(layer, layers.PReLU):
            layer.set_weights([rng.uniform(0.05, 0.4, layer.alpha.shape).astype("float32")])
    model.save(HERE / "legacy_tf_keras_2_15.h5")
    x = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    box, prob, mask = model.predict_on_batch(x)
    np.savez(HERE / "legacy_tf_keras_2_15.npz", x=x, box=box, prob=prob, mask=mask)
    print(f"tf {tf.__version__}: {model.count_params()} parameters, layers {[layer.name for layer in model.layers]}")


if __name__ == "__main__":
    main()
