"""MCT 2.6.1's data-generation configuration, framework-free: the enums (MCT's names, values and spelling,
``BatchNormAlignemntLossType`` included), DataGenerationConfig validated when built, and each framework's
defaults as MCT sets them (the framework objects among them, the optimizer and the layer types, are filled
in by the framework's facade)."""
from __future__ import annotations

from enum import Enum
from typing import Any, List, Optional, Sequence, Tuple, Type, Union

from hwquant.errors import InvalidConfigError


class EnumBaseClass(Enum):
    @classmethod
    def get_values(cls) -> list:
        return list(cls.__members__.values())

    @classmethod
    def get_enum_by_value(cls, target_value: Any) -> Optional["EnumBaseClass"]:
        return next((m for m in cls.__members__.values() if m.value == target_value), None)


class ImageGranularity(EnumBaseClass):
    """Over which images the batch-norm statistics are matched: each image, each batch, all images."""
    ImageWise = 0
    BatchWise = 1
    AllImages = 2


class DataInitType(EnumBaseClass):
    """How the images start: Gaussian noise, or diverse (a different mean and spread per image)."""
    Gaussian = 0
    Diverse = 1


class ImagePipelineType(EnumBaseClass):
    """What is done to the images before each step: smoothing then random crop and flip, or nothing."""
    SMOOTHING_AND_AUGMENTATION = "smoothing_and_augmentation"
    IDENTITY = "identity"


class ImageNormalizationType(EnumBaseClass):
    """The normalization the model expects: torchvision's ImageNet mean / std, keras_applications', or none."""
    TORCHVISION = "torchvision"
    KERAS_APPLICATIONS = "keras_applications"
    NO_NORMALIZATION = "no_normalization"


class BNLayerWeightingType(EnumBaseClass):
    """How the batch-norm layers' losses are weighted: equally, the first one more, or by their gradients."""
    AVERAGE = "average"
    FIRST_LAYER_MULTIPLIER = "first_layer_multiplier"
    GRAD = "grad"


class BatchNormAlignemntLossType(EnumBaseClass):
    """The batch-norm alignment loss (MCT's spelling): squared L2 distance of the means and of the variances."""
    L2_SQUARE = "l2_square"


class OutputLossType(EnumBaseClass):
    """The loss on the model's output (its last layers): none, or one that widens the output's range."""
    NONE = "none"
    NEGATIVE_MIN_MAX_DIFF = "negative_min_max_diff"
    INVERSE_MIN_MAX_DIFF = "inverse_min_max_diff"
    REGULARIZED_MIN_MAX_DIFF = "regularized_min_max_diff"


class SchedulerType(EnumBaseClass):
    """The learning-rate schedule: reduce on plateau (with a reset), or steps."""
    REDUCE_ON_PLATEAU = "reduce_on_plateau"
    REDUCE_ON_PLATEAU_WITH_RESET = "reduce_on_plateau_with_reset"
    STEP = "step"


DEFAULT_N_ITER = 500
DEFAULT_DATA_GEN_BS = 32
# MCT's per-framework defaults (the optimizer and the layer types are the framework's own objects)
# hwquant departs from MCT in two measured places (docs/BENCHMARKS.md, "Data-free quantization"): PyTorch's output
# loss weighs 1e-3, not 1e-5 (MobileNetV2 W8A8 agreement 85.6 -> 90.9 %, the Fashion CNNs unchanged), and Keras'
# output loss is NEGATIVE_MIN_MAX_DIFF, not REGULARIZED_MIN_MAX_DIFF (which holds the logits near half their bound:
# 20 % agreement on MobileNetV2)
PYTORCH_DEFAULTS = dict(initial_lr=16.0, output_loss_multiplier=1e-3, extra_pixels=32,
                        scheduler_type=SchedulerType.REDUCE_ON_PLATEAU_WITH_RESET,
                        output_loss_type=OutputLossType.NEGATIVE_MIN_MAX_DIFF, image_granularity=ImageGranularity.AllImages,
                        image_normalization_type=ImageNormalizationType.TORCHVISION, image_clipping=True)
KERAS_DEFAULTS = dict(initial_lr=1.0, output_loss_multiplier=1e-3, extra_pixels=32,
                      scheduler_type=SchedulerType.REDUCE_ON_PLATEAU,
                      output_loss_type=OutputLossType.NEGATIVE_MIN_MAX_DIFF, image_granularity=ImageGranularity.BatchWise,
                      image_normalization_type=ImageNormalizationType.KERAS_APPLICATIONS, image_clipping=False)


def _enum(name: str, value: Any, enum: Type[Enum]) -> Any:
    if not isinstance(value, enum):
        raise InvalidConfigError(f"{name} must be a {enum.__name__} ({', '.join(m.name for m in enum)}), got {value!r}")
    return value


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _non_negative(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidConfigError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def _extra_pixels(value: Any) -> Tuple[int, int]:
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2
            and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in pair)):
        raise InvalidConfigError(f"extra_pixels must be an int >= 0 or a pair of them (height, width), got {value!r}")
    return int(pair[0]), int(pair[1])


class DataGenerationConfig:
    """What data generation does (MCT's fields); validated when built: each field named with its rule."""

    def __init__(self, n_iter: int, optimizer: Any, data_gen_batch_size: int, initial_lr: float,
                 output_loss_multiplier: float, image_granularity: ImageGranularity = ImageGranularity.AllImages,
                 scheduler_type: Optional[SchedulerType] = None,
                 bn_alignment_loss_type: Optional[BatchNormAlignemntLossType] = None,
                 output_loss_type: Optional[OutputLossType] = None, data_init_type: Optional[DataInitType] = None,
                 layer_weighting_type: Optional[BNLayerWeightingType] = None,
                 image_pipeline_type: Optional[ImagePipelineType] = None,
                 image_normalization_type: Optional[ImageNormalizationType] = None,
                 extra_pixels: Union[int, Tuple[int, int]] = 0, bn_layer_types: Sequence[Any] = (),
                 last_layer_types: Sequence[Any] = (), image_clipping: bool = True):
        self.n_iter = _positive_int("n_iter", n_iter)
        if optimizer is None:
            raise InvalidConfigError("optimizer must be an optimizer class (torch.optim.RAdam, keras.optimizers.Adam, ...)")
        self.optimizer = optimizer
        self.data_gen_batch_size = _positive_int("data_gen_batch_size", data_gen_batch_size)
        self.initial_lr = _non_negative("initial_lr", initial_lr)
        if self.initial_lr == 0:
            raise InvalidConfigError("initial_lr must be > 0, got 0")
        self.output_loss_multiplier = _non_negative("output_loss_multiplier", output_loss_multiplier)
        self.image_granularity = _enum("image_granularity", image_granularity, ImageGranularity)
        self.scheduler_type = _enum("scheduler_type", scheduler_type or SchedulerType.REDUCE_ON_PLATEAU, SchedulerType)
        self.bn_alignment_loss_type = _enum("bn_alignment_loss_type",
                                            bn_alignment_loss_type or BatchNormAlignemntLossType.L2_SQUARE,
                                            BatchNormAlignemntLossType)
        self.output_loss_type = _enum("output_loss_type", output_loss_type or OutputLossType.NONE, OutputLossType)
        self.data_init_type = _enum("data_init_type", data_init_type or DataInitType.Gaussian, DataInitType)
        self.layer_weighting_type = _enum("layer_weighting_type", layer_weighting_type or BNLayerWeightingType.AVERAGE,
                                          BNLayerWeightingType)
        self.image_pipeline_type = _enum("image_pipeline_type",
                                         image_pipeline_type or ImagePipelineType.SMOOTHING_AND_AUGMENTATION,
                                         ImagePipelineType)
        self.image_normalization_type = _enum("image_normalization_type",
                                              image_normalization_type or ImageNormalizationType.NO_NORMALIZATION,
                                              ImageNormalizationType)
        self.extra_pixels = _extra_pixels(extra_pixels)
        self.bn_layer_types: List[Any] = list(bn_layer_types)
        self.last_layer_types: List[Any] = list(last_layer_types)
        if not isinstance(image_clipping, bool):
            raise InvalidConfigError(f"image_clipping must be True or False, got {image_clipping!r}")
        self.image_clipping = image_clipping
