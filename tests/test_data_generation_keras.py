"""mct.data_generation's Keras path (torch and tensorflow backends): images generated from a batch-norm model alone
match its batch norms' statistics, have the asked shape, and calibrate PTQ; MCT's Keras default output loss
(REGULARIZED_MIN_MAX_DIFF on the last Dense; hwquant's default is NEGATIVE_MIN_MAX_DIFF), all images optimised
together, GRAD weighting; fallbacks and bad input."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")

import hwquant as mct  # noqa: E402
from hwquant.errors import InvalidConfigError  # noqa: E402


def _model():
    """conv-BN-ReLU x2, global pooling, dense; the batch norms hold the statistics of images the generator never
    sees (a mean of 1.5, a spread of 0.5): reachable targets."""
    keras.utils.set_random_seed(0)
    L = keras.layers
    inp = keras.Input((12, 12, 1))
    x = L.ReLU()(L.BatchNormalization(name="bn1")(L.Conv2D(8, 3, padding="same", name="c1")(inp)))
    x = L.ReLU()(L.BatchNormalization(name="bn2")(L.Conv2D(8, 3, padding="same", name="c2")(x)))
    model = keras.Model(inp, L.Dense(4)(L.GlobalAveragePooling2D()(x)))
    data = (1.5 + 0.5 * np.random.default_rng(0).standard_normal((64, 12, 12, 1))).astype(np.float32)
    for name, source in (("bn1", "c1"), ("bn2", "c2")):
        feats = keras.ops.convert_to_numpy(keras.Model(inp, model.get_layer(source).output)(data))
        bn = model.get_layer(name)
        gamma, beta, _, _ = bn.get_weights()
        bn.set_weights([gamma, beta, feats.mean((0, 1, 2)), feats.var((0, 1, 2))])
    return model


def _bn_gap(model, images):
    gaps = []
    for name, source in (("bn1", "c1"), ("bn2", "c2")):
        feats = keras.ops.convert_to_numpy(keras.Model(model.inputs, model.get_layer(source).output)(images))
        gaps.append(np.mean((feats.mean((0, 1, 2)) - model.get_layer(name).get_weights()[2]) ** 2))
    return float(np.mean(gaps))


def test_generated_images_match_the_batch_norms_and_calibrate():
    if keras.backend.backend() == "jax":
        pytest.skip("gradients through Keras models: torch and tensorflow backends")
    model = _model()
    config = mct.data_generation.get_keras_data_generation_config(
        n_iter=60, data_gen_batch_size=8, initial_lr=0.1, extra_pixels=2,
        output_loss_type=mct.data_generation.OutputLossType.REGULARIZED_MIN_MAX_DIFF,
        image_normalization_type=mct.data_generation.ImageNormalizationType.NO_NORMALIZATION)
    images = mct.data_generation.keras_data_generation_experimental(model, 10, 12, config)
    assert len(images) == 10 and all(tuple(i.shape) == (1, 12, 12, 1) for i in images)
    generated = np.concatenate(images)
    start = np.random.default_rng(1).standard_normal(generated.shape).astype(np.float32)
    assert _bn_gap(model, generated) < 0.2 * _bn_gap(model, start)
    quantized, _ = mct.ptq.keras_post_training_quantization(model, lambda: iter([[generated]]))
    assert quantized.predict(generated, verbose=0).shape == (10, 4)
    report = images.report
    assert report.output_loss == "REGULARIZED_MIN_MAX_DIFF" and report.last_layer == model.layers[-1].name
    assert report.batch_norm_layers == ["bn1", "bn2"] and report.image_granularity == "BatchWise"
    # the images and Adam's two moments, per image
    assert 3 * 4 * 14 * 14 <= report.held_bytes_per_image < 4 * 4 * 14 * 14


def test_all_images_with_grad_weighting_and_the_fallback_without_batch_norm():
    if keras.backend.backend() == "jax":
        pytest.skip("gradients through Keras models: torch and tensorflow backends")
    dg = mct.data_generation
    model = _model()
    config = dg.get_keras_data_generation_config(
        n_iter=40, data_gen_batch_size=4, initial_lr=0.1, extra_pixels=2,
        image_granularity=dg.ImageGranularity.AllImages, layer_weighting_type=dg.BNLayerWeightingType.GRAD,
        image_normalization_type=dg.ImageNormalizationType.NO_NORMALIZATION)
    images = dg.keras_data_generation_experimental(model, 6, 12, config)
    generated = np.concatenate(images)
    start = np.random.default_rng(1).standard_normal(generated.shape).astype(np.float32)
    assert _bn_gap(model, generated) < 0.3 * _bn_gap(model, start)
    assert len(images.report.final_losses) == 2 and np.isclose(sum(images.report.layer_weights.values()), 1.0)
    L = keras.layers
    inp = keras.Input((9, 10, 3))
    plain = keras.Model(inp, L.Dense(3)(L.GlobalAveragePooling2D()(L.Conv2D(4, 3, activation="relu")(inp))))
    out = dg.keras_data_generation_experimental(plain, 2, (9, 10), dg.get_keras_data_generation_config(
        n_iter=3, extra_pixels=2))
    assert [i.shape for i in out] == [(1, 9, 10, 3)] * 2
    assert out.report.batch_norm_layers == [] and "no batch-norm layer" in out.report.fallbacks[0]


def test_bad_input():
    model = _model()
    config = mct.data_generation.get_keras_data_generation_config(n_iter=1)
    with pytest.raises(InvalidConfigError, match="n_images must be an int >= 1"):
        mct.data_generation.keras_data_generation_experimental(model, 0, 12, config)
    with pytest.raises(InvalidConfigError, match="output_image_size must be"):
        mct.data_generation.keras_data_generation_experimental(model, 1, "big", config)
    with pytest.raises(InvalidConfigError, match="does not run on images of 30 x 30 x 1"):
        mct.data_generation.keras_data_generation_experimental(_fixed(), 1, 30, config)
    sequence = keras.Model(*(lambda i: (i, keras.layers.Dense(2)(i)))(keras.Input((5, 3))))
    with pytest.raises(InvalidConfigError, match="one input of shape"):
        mct.data_generation.keras_data_generation_experimental(sequence, 1, 12, config)


def _fixed():
    """A model that takes 12 x 12 images only (a flatten into a fixed Dense)."""
    inp = keras.Input((12, 12, 1))
    return keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(keras.layers.BatchNormalization()(inp))))
