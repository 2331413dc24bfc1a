"""mct.data_generation on real Keras models (torch and tensorflow backends): keras.applications' MobileNetV2, batch
norms after depthwise and separable convolutions, branches merged by Add and Concatenate, and layers named so that
a folded layer's new name ('<layer>_bn') is its batch norm's. Each model's batch norms hold the statistics of
images the generator never sees; the generated images must bring the batch norms' inputs nearer to them than the
images they start from, and folding the batch norms (for speed) must change nothing but the time."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")

import hwquant as mct  # noqa: E402

dg = mct.data_generation
L = keras.layers
SIZE = 32


@pytest.fixture(autouse=True)
def _gradients_backend():
    if keras.backend.backend() == "jax":
        pytest.skip("gradients through Keras models: torch and tensorflow backends")


def _real_images(n, size, channels=3, seed=0):
    """The 'real' data the batch norms saw: smooth images, each channel its own mean and spread."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((n, size // 4, size // 4, channels))
    smooth = np.repeat(np.repeat(coarse, 4, axis=1), 4, axis=2) + 0.3 * rng.standard_normal((n, size, size, channels))
    return (np.asarray([0.5, -0.4, 1.2][:channels]) + np.asarray([0.6, 1.3, 0.8][:channels]) * smooth).astype(np.float32)


def _batch_norms(model):
    return [layer for layer in model.layers if isinstance(layer, L.BatchNormalization)]


def _calibrate(model, size):
    """Every batch norm's stored statistics, those of its input on the real images (one training pass with momentum
    0: each batch norm normalizes with the same statistics it then stores)."""
    for layer in _batch_norms(model):
        layer.momentum = 0.0
    model(_real_images(32, size), training=True)
    return model


def _bn_gap(model, images):
    """The batch norms' inputs' channel means on ``images`` against their stored ones, in stored standard
    deviations, squared, averaged over channels and layers."""
    bns = _batch_norms(model)
    probe = keras.Model(model.inputs[0], [layer.input for layer in bns])
    gaps = []
    for layer, feats in zip(bns, probe(images, training=False)):
        mean = keras.ops.convert_to_numpy(feats).mean((0, 1, 2))
        stored_mean, stored_var = (keras.ops.convert_to_numpy(w) for w in (layer.moving_mean, layer.moving_variance))
        gaps.append(np.mean((mean - stored_mean) ** 2 / (stored_var + 1e-3)))
    return float(np.mean(gaps))


def _config(n_iter, lr=0.1, **kw):
    return dg.get_keras_data_generation_config(
        n_iter=n_iter, data_gen_batch_size=8, initial_lr=lr, extra_pixels=4,
        image_normalization_type=dg.ImageNormalizationType.TORCHVISION, **kw)


def _generate_and_check(model, size, config, factor):
    images = dg.keras_data_generation_experimental(model, 8, size, config)
    assert [tuple(i.shape) for i in images] == [(1, size, size, 3)] * 8
    generated = np.concatenate(images)
    start = np.random.default_rng(1).standard_normal(generated.shape).astype(np.float32)
    assert _bn_gap(model, generated) < factor * _bn_gap(model, start)
    assert sorted(images.report.batch_norm_layers) == sorted(layer.name for layer in _batch_norms(model))
    return images


def test_mobilenet_v2_from_keras_applications():
    """Its last batch norm, after 'Conv_1', is named 'Conv_1_bn': the name the folded 'Conv_1' takes. (A few steps
    on a randomly initialised MobileNetV2 bring its 52 batch norms' inputs a third nearer to their statistics.)"""
    keras.utils.set_random_seed(0)
    model = _calibrate(keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3), alpha=0.35, classes=10),
                       64)
    assert {"Conv_1", "Conv_1_bn"} <= {layer.name for layer in model.layers}
    images = _generate_and_check(model, 64, _config(8, lr=0.3), 0.8)
    assert images.report.folded_batch_norms == len(_batch_norms(model)) == 52


def _depthwise_separable_model():
    """Batch norms after a depthwise convolution, after a separable one (split in two: the norm folds into the
    pointwise half) and after another batch norm; layers named '<x>' and '<x>_bn'."""
    keras.utils.set_random_seed(1)
    inp = keras.Input((SIZE, SIZE, 3))
    x = L.ReLU()(L.BatchNormalization(name="stem_bn")(L.Conv2D(8, 3, strides=2, padding="same", name="stem")(inp)))
    x = L.ReLU(6.0)(L.BatchNormalization(name="dw_bn")(L.DepthwiseConv2D(3, padding="same", name="dw")(x)))
    x = L.SeparableConv2D(16, 3, padding="same", use_bias=False, name="sep")(x)
    x = L.BatchNormalization(name="sep_bn2")(L.BatchNormalization(name="sep_bn")(x))
    x = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="relu", name="dw2")(L.ReLU()(x))
    x = L.BatchNormalization(name="dw2_bn")(x)
    return keras.Model(inp, L.Dense(5)(L.GlobalAveragePooling2D()(x)))


def _branched_model():
    """Two paths merged by Add (a batch norm after it: nothing to fold into) and by Concatenate."""
    keras.utils.set_random_seed(2)
    inp = keras.Input((SIZE, SIZE, 3))
    stem = L.ReLU()(L.BatchNormalization(name="stem_bn")(L.Conv2D(8, 3, strides=2, padding="same", name="stem")(inp)))
    a = L.ReLU()(L.BatchNormalization(name="a_bn")(L.Conv2D(8, 3, padding="same", name="a")(stem)))
    b = L.BatchNormalization(name="b_bn")(L.DepthwiseConv2D(3, padding="same", name="b")(stem))
    added = L.BatchNormalization(name="add_bn")(L.Add(name="add")([a, b]))
    c = L.ReLU()(L.BatchNormalization(name="c_bn")(L.Conv2D(8, 1, name="c")(added)))
    d = L.ReLU()(L.BatchNormalization(name="d_bn")(L.Conv2D(8, 3, padding="same", name="d")(stem)))
    x = L.BatchNormalization(name="cat_bn")(L.Concatenate(name="cat")([c, d, added]))
    x = L.GlobalAveragePooling2D()(L.Conv2D(12, 1, name="head")(x))
    return keras.Model(inp, L.Dense(5, name="logits")(x))


@pytest.mark.parametrize("build", [_depthwise_separable_model, _branched_model])
def test_depthwise_separable_and_branched_models(build):
    model = _calibrate(build(), SIZE)
    _generate_and_check(model, SIZE, _config(20), 0.3)


@pytest.mark.parametrize("build", [_depthwise_separable_model, _branched_model])
def test_folding_changes_nothing_but_the_time(build, monkeypatch):
    """The batch norms folded into the layers before them give the images of the unfolded model (to rounding):
    every statistic is read where it should be, whatever the folded layers are renamed."""
    from hwquant.data_generation import generator
    model = _calibrate(build(), SIZE)
    for layer in _batch_norms(model):  # unequal scales and shifts
        gamma, beta, mean, var = layer.get_weights()
        layer.set_weights([np.linspace(0.5, 2.0, len(gamma)).astype(np.float32),
                           np.linspace(-1.0, 1.0, len(beta)).astype(np.float32), mean, var])
    config = _config(3, output_loss_type=dg.OutputLossType.REGULARIZED_MIN_MAX_DIFF, output_loss_multiplier=0.1)
    folded = dg.keras_data_generation_experimental(model, 4, SIZE, config)
    monkeypatch.setattr(generator, "MIN_FOLDED_SCALE", float("inf"))
    unfolded = dg.keras_data_generation_experimental(model, 4, SIZE, config)
    assert folded.report.folded_batch_norms > 0 and unfolded.report.folded_batch_norms == 0
    np.testing.assert_allclose(np.concatenate(folded), np.concatenate(unfolded), atol=5e-4, rtol=1e-3)
    np.testing.assert_allclose(folded.report.final_losses, unfolded.report.final_losses, rtol=1e-3)
