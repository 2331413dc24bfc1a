"""mct.data_generation's configuration: MCT 2.6.1's enum names and values, the
configuration validated when built."""
import pytest

import hwquant as mct
from hwquant.data_generation import (BatchNormAlignemntLossType, BNLayerWeightingType, DataGenerationConfig,
                                     DataInitType, ImageGranularity, ImageNormalizationType, ImagePipelineType,
                                     OutputLossType, SchedulerType)
from hwquant.errors import InvalidConfigError


def test_mcts_enum_names_and_values():
    assert [m.value for m in ImageGranularity] == [0, 1, 2] and ImageGranularity.AllImages.value == 2
    assert DataInitType.Diverse.value == 1
    assert ImagePipelineType.SMOOTHING_AND_AUGMENTATION.value == "smoothing_and_augmentation"
    assert ImageNormalizationType.KERAS_APPLICATIONS.value == "keras_applications"
    assert BNLayerWeightingType.get_enum_by_value("grad") is BNLayerWeightingType.GRAD
    assert BatchNormAlignemntLossType.L2_SQUARE.value == "l2_square"
    assert OutputLossType.get_values()[0] is OutputLossType.NONE
    assert SchedulerType.REDUCE_ON_PLATEAU_WITH_RESET.value == "reduce_on_plateau_with_reset"
    assert mct.data_generation.ImageGranularity is ImageGranularity


def test_config_is_validated_when_built():
    config = DataGenerationConfig(n_iter=10, optimizer=object, data_gen_batch_size=4, initial_lr=16,
                                  output_loss_multiplier=1e-5, extra_pixels=8)
    assert config.extra_pixels == (8, 8) and config.scheduler_type is SchedulerType.REDUCE_ON_PLATEAU
    for field, value, rule in (("n_iter", 0, "n_iter must be an int >= 1"),
                               ("data_gen_batch_size", 2.5, "data_gen_batch_size must be an int"),
                               ("initial_lr", 0, "initial_lr must be > 0"),
                               ("output_loss_multiplier", -1, "output_loss_multiplier must be a number >= 0"),
                               ("extra_pixels", (1, 2, 3), "extra_pixels must be an int >= 0 or a pair"),
                               ("image_granularity", "AllImages", "image_granularity must be a ImageGranularity"),
                               ("optimizer", None, "optimizer must be an optimizer class")):
        kwargs = dict(n_iter=10, optimizer=object, data_gen_batch_size=4, initial_lr=16, output_loss_multiplier=0.0)
        kwargs[field] = value
        with pytest.raises(InvalidConfigError, match=rule):
            DataGenerationConfig(**kwargs)


def test_learning_rate_schedules():
    from hwquant.data_generation.schedule import LearningRateSchedule
    step = LearningRateSchedule(SchedulerType.STEP, 1.0, n_iter=9)
    assert [round(step.step(0.0), 6) for _ in range(9)] == [1.0, 1.0, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001]
    # patience n_iter / 50 = 2: the third step without improvement halves the rate
    plateau = LearningRateSchedule(SchedulerType.REDUCE_ON_PLATEAU, 16.0, n_iter=100)
    rates = [plateau.step(loss) for loss in (5.0, 4.0, 4.0, 4.0, 4.0, 3.0, 3.0, 3.0, 3.0)]
    assert rates == [16.0, 16.0, 16.0, 16.0, 8.0, 8.0, 8.0, 8.0, 4.0]
    # with reset, the best loss is forgotten after a reduction: a higher plateau is judged on its own
    reset = LearningRateSchedule(SchedulerType.REDUCE_ON_PLATEAU_WITH_RESET, 16.0, n_iter=100)
    rates = [reset.step(loss) for loss in (4.0, 4.0, 4.0, 4.0, 5.0, 4.5, 4.5, 4.5, 4.5)]
    assert rates == [16.0, 16.0, 16.0, 8.0, 8.0, 8.0, 8.0, 8.0, 4.0]
    floor = LearningRateSchedule(SchedulerType.REDUCE_ON_PLATEAU, 2e-4, n_iter=50)  # patience 1
    assert [floor.step(1.0) for _ in range(5)][-1] == 1e-4


def test_losses_by_mcts_formulas():
    import numpy as np

    from hwquant.data_generation import losses
    ops = losses.NumpyOps()
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, (64, 4, 8, 8)).astype(np.float32)  # channels first
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))

    def loss(x, axis, target_mean, per_image=False):
        return losses.bn_alignment(ops, *losses.batch_stats(ops, x, axis, per_image), target_mean, var)
    assert abs(loss(x, 1, mean)) < 1e-6  # the input already has the stored statistics
    # a shift of 1 in every channel's mean: squared distance 4 over 4 channels
    assert np.isclose(loss(x, 1, mean + 1.0), 1.0, atol=1e-4)
    assert np.isclose(loss(np.moveaxis(x, 1, -1), -1, mean + 1.0), 1.0, atol=1e-4)
    # per image: each image's own statistics, summed over the images
    one = np.broadcast_to(x[:1], x.shape)
    m1, v1 = x[0].mean(axis=(1, 2)), x[0].var(axis=(1, 2))
    assert np.isclose(losses.bn_alignment(ops, *losses.batch_stats(ops, one, 1, True), m1 + 1.0, v1), 64.0, atol=1e-3)
    # GRAD: the inverse gradient norms, normalised; a vanished gradient takes the smallest measured norm's weight
    grad = losses.layer_weights(BNLayerWeightingType.GRAD, ["a", "b", "c"], [1.0, 4.0, 0.0])
    assert np.allclose([grad["a"], grad["b"], grad["c"]], np.array([1.0, 0.25, 1.0]) / 2.25)
    assert losses.layer_weights(BNLayerWeightingType.AVERAGE, ["a", "b"]) == {"a": 0.5, "b": 0.5}
    assert losses.layer_weights(BNLayerWeightingType.FIRST_LAYER_MULTIPLIER, ["a", "b"]) == {"a": 10.0, "b": 1.0}
    out = np.array([[0.0, 2.0, 1.0], [1.0, 5.0, 3.0]])
    assert losses.output_loss(ops, OutputLossType.NEGATIVE_MIN_MAX_DIFF, [out]) == -3.0
    assert np.isclose(losses.output_loss(ops, OutputLossType.INVERSE_MIN_MAX_DIFF, [out]), 1 / 3.0, atol=1e-5)
    assert losses.output_loss(ops, OutputLossType.NONE, [out]) == 0.0
    # regularized: the inverse range plus how far the extreme units are from |feature| x their weight norm
    last = losses.LastLayer("fc", "pool", "fc", np.array([1.0, 2.0, 3.0], np.float32))
    feature = np.full((2, 4), 1.0)  # the layer's input, 4 channels of 1: norm 2, half of it 1
    reg = losses.output_loss(ops, OutputLossType.REGULARIZED_MIN_MAX_DIFF, [out], out, last, feature, 1)
    # image 0: max 2 (unit 1, norm 2), min 0 (unit 0, norm 1): |2 - 2| + |0 - 1| + 1/2; image 1: |5 - 2| + |1 - 1| + 1/4
    assert np.isclose(reg, ((0 + 1 + 0.5) + (3 + 0 + 0.25)) / 2, atol=1e-4)
