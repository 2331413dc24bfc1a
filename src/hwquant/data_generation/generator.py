"""Data generation, the order of work written once (issue 32, in progress): images optimised so that every
batch-norm layer's input has the layer's stored mean and spread, with an output loss, under a learning-rate
schedule, through an image pipeline (random flip, smoothing, random crop from a larger canvas, clipping to the
valid range), then finalised (smoothing, centre crop, clipping). Each framework gives a small back end: the
tensor operations the losses use, the model run with its batch-norm inputs, and one optimiser step."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from hwquant.data_generation import losses
from hwquant.data_generation.config import (DataGenerationConfig, DataInitType, ImageNormalizationType,
                                            ImagePipelineType)
from hwquant.data_generation.schedule import LearningRateSchedule
from hwquant.errors import InvalidConfigError
from hwquant.logger import progress

log = logging.getLogger("hwquant.data_generation")

# (mean, std) per RGB channel of each normalization, on images in [0, 1] (torchvision) or [0, 255] (Keras)
NORMALIZATION = {ImageNormalizationType.TORCHVISION: ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 1.0),
                 ImageNormalizationType.KERAS_APPLICATIONS: ((127.5, 127.5, 127.5), (127.5, 127.5, 127.5), 255.0),
                 ImageNormalizationType.NO_NORMALIZATION: ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 1.0)}


@dataclass
class BatchNormTarget:
    name: str              # the batch-norm layer
    input_name: str        # the tensor it normalises
    mean: np.ndarray
    var: np.ndarray


class GenerationBackend(Protocol):
    ops: losses.TensorOps
    channel_axis: int      # of the images (1: channels first, -1: channels last)

    def images(self, values: np.ndarray) -> Any:
        """A trainable tensor (or variable) holding ``values``."""

    def run(self, images: Any) -> Tuple[List[Any], Dict[str, Any]]:
        """(the model's outputs, {batch-norm input name: tensor}) for ``images``."""

    def step(self, images: Any, loss: Callable[[Any], Any], lr: float) -> float:
        """One optimiser step on ``images`` at rate ``lr`` for ``loss(images)``; the loss's value."""

    def transform(self, images: Any, flip: bool, crop: Optional[Tuple[int, int]], size: Tuple[int, int],
                  smooth: bool, low: Optional[np.ndarray], high: Optional[np.ndarray]) -> Any:
        """The pipeline: flip horizontally, smooth (3x3 Gaussian, sigma 1.25), crop ``size`` at ``crop`` (row,
        column; None: the centre), clip each channel to [low, high] (None: no clipping)."""

    def finalize(self, images: Any) -> List[Any]:
        """The generated images, one tensor per image (a batch of one), detached."""


def smoothing_kernel(size: int = 3, sigma: float = 1.25) -> np.ndarray:
    """The pipeline's smoothing filter (MCT's: a 3 x 3 Gaussian, sigma 1.25), normalised to sum 1."""
    x = np.arange(size, dtype=np.float32) - (size - 1) / 2
    g = np.exp(-(x[:, None] ** 2 + x[None, :] ** 2) / (2 * sigma ** 2))
    return (g / g.sum()).astype(np.float32)


def check_request(n_images: Any, output_image_size: Any, config: Any) -> Tuple[int, int]:
    """The facades' argument checks; the image size as (height, width)."""
    if isinstance(n_images, bool) or not isinstance(n_images, int) or n_images < 1:
        raise InvalidConfigError(f"n_images must be an int >= 1, got {n_images!r}")
    if not isinstance(config, DataGenerationConfig):
        raise InvalidConfigError("data_generation_config must be a DataGenerationConfig (from get_pytorch_ / "
                                 f"get_keras_data_generation_config()), got {type(config).__name__}")
    pair = (output_image_size, output_image_size) if isinstance(output_image_size, int) else output_image_size
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in pair)):
        raise InvalidConfigError(f"output_image_size must be an int >= 1 or a pair (height, width) of them, got "
                                 f"{output_image_size!r}")
    return int(pair[0]), int(pair[1])


def valid_range(config: DataGenerationConfig, channels: int) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Each channel's valid range after the model's normalization (None: no clipping)."""
    if not config.image_clipping:
        return None, None
    mean, std, top = NORMALIZATION[config.image_normalization_type]
    mean_c, std_c = np.resize(np.asarray(mean), channels), np.resize(np.asarray(std), channels)
    return (0.0 - mean_c) / std_c, (top - mean_c) / std_c


def initial_values(kind: DataInitType, shape: Tuple[int, ...], channel_axis: int, rng: np.random.Generator) -> np.ndarray:
    if kind == DataInitType.Gaussian:
        return rng.standard_normal(shape).astype(np.float32)
    # Diverse: each image its own mean and spread
    per_image = (shape[0],) + (1,) * (len(shape) - 1)
    return (rng.uniform(-1.0, 1.0, per_image) + rng.uniform(0.5, 1.5, per_image)
            * rng.standard_normal(shape)).astype(np.float32)


def generate(backend: GenerationBackend, targets: Sequence[BatchNormTarget], n_images: int, size: Tuple[int, int],
             channels: int, config: DataGenerationConfig, seed: int = 0) -> List[Any]:
    if not targets and config.output_loss_type.value == "none":
        raise InvalidConfigError("the model has no batch-norm layer to match and the output loss is NONE: nothing "
                                 "guides the images; set output_loss_type (e.g. OutputLossType.NEGATIVE_MIN_MAX_DIFF)")
    rng = np.random.default_rng(seed)
    weights = losses.layer_weights(config.layer_weighting_type, [t.name for t in targets]) if targets else {}
    augment = config.image_pipeline_type == ImagePipelineType.SMOOTHING_AND_AUGMENTATION
    extra = config.extra_pixels if augment else (0, 0)
    canvas = (size[0] + extra[0], size[1] + extra[1])
    low, high = valid_range(config, channels)
    images_out: List[Any] = []
    start = time.perf_counter()
    n_batches = -(-n_images // config.data_gen_batch_size)
    for batch, first in enumerate(range(0, n_images, config.data_gen_batch_size)):
        count = min(config.data_gen_batch_size, n_images - first)
        shape = (count, channels, *canvas) if backend.channel_axis == 1 else (count, *canvas, channels)
        images = backend.images(initial_values(config.data_init_type, shape, backend.channel_axis, rng))
        schedule = LearningRateSchedule(config.scheduler_type, config.initial_lr, config.n_iter)
        lr = config.initial_lr
        for _ in progress(range(config.n_iter), f"data generation, batch {batch + 1}/{n_batches}"):
            flip = augment and bool(rng.integers(2))
            crop = (int(rng.integers(extra[0] + 1)), int(rng.integers(extra[1] + 1)))

            def loss(x, flip=flip, crop=crop):
                x = backend.transform(x, flip, crop, size, augment, low, high)
                outputs, bn_inputs = backend.run(x)
                total: Any = losses.output_loss(backend.ops, config.output_loss_type, outputs) \
                    * config.output_loss_multiplier
                for t in targets:
                    total = total + weights[t.name] * losses.bn_alignment(
                        backend.ops, bn_inputs[t.input_name], backend.channel_axis, t.mean, t.var)
                return total
            lr = schedule.step(backend.step(images, loss, lr))
        images_out += backend.finalize(backend.transform(images, False, None, size, augment, low, high))
    seconds = time.perf_counter() - start
    log.info("generated %d images of %dx%d in %.1f s (%.2f s per image), %d batch-norm layers matched",
             n_images, size[0], size[1], seconds, seconds / max(n_images, 1), len(targets))
    return images_out
