"""mct.data_generation's configuration (issue 32, in progress): MCT 2.6.1's enum names and values, the
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
