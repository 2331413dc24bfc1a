"""mct.data_generation's Keras facades (issue 32, in progress; torch and tensorflow backends) and the generator's
Keras back end: the float model built from its graph with its batch-norm inputs as extra outputs, keras.ops for
the losses, one optimiser step on the images (a Keras variable), the image pipeline."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import keras
import numpy as np

from hwquant.concurrency import KERAS_LOCK
from hwquant.data_generation.config import (DEFAULT_DATA_GEN_BS, DEFAULT_N_ITER, KERAS_DEFAULTS,
                                            BatchNormAlignemntLossType, BNLayerWeightingType, DataGenerationConfig,
                                            DataInitType, ImageGranularity, ImageNormalizationType,
                                            ImagePipelineType, OutputLossType, SchedulerType)
from hwquant.data_generation.generator import BatchNormTarget, check_request, generate, smoothing_kernel
from hwquant.errors import InvalidConfigError
from hwquant.keras.adapter import KerasAdapter
from hwquant.keras.builder import build_model
from hwquant.keras.capture import capture
from hwquant.keras.gradients import variable_gradients

K = keras.ops


class KerasOps:
    def mean(self, x, axes):
        return K.mean(x, axis=tuple(axes))

    def var(self, x, axes):
        return K.var(x, axis=tuple(axes))

    def sum(self, x):
        return K.sum(x)

    def amax(self, x, axis):
        return K.max(x, axis=axis)

    def amin(self, x, axis):
        return K.min(x, axis=axis)

    def sqrt(self, x):
        return K.sqrt(x)

    def reshape(self, x, shape):
        return K.reshape(x, shape)

    def constant(self, value, like):
        return K.convert_to_tensor(np.asarray(value, np.float32))


class KerasGenerationBackend:
    ops = KerasOps()
    channel_axis = -1

    def __init__(self, model: Any, bn_inputs: List[str], optimizer: Any):
        self.model, self.bn_inputs, self.optimizer_class = model, bn_inputs, optimizer
        self._optimizer: Tuple[Any, Any] = (None, None)  # (the images it steps, the optimizer): one batch at a time

    def images(self, values: np.ndarray) -> Any:
        return keras.Variable(values, dtype="float32", trainable=True)

    def run(self, images: Any) -> Tuple[List[Any], Dict[str, Any]]:
        outputs, tensors = self.model(images, training=False)
        return keras.tree.flatten(outputs), dict(zip(self.bn_inputs, tensors))

    def step(self, images: Any, loss: Callable[[Any], Any], lr: float) -> float:
        if self._optimizer[0] is not images:  # (a new batch: the last one's optimizer state is let go)
            self._optimizer = (images, self.optimizer_class(learning_rate=lr))
        optimizer = self._optimizer[1]
        optimizer.learning_rate = lr
        value, grads = variable_gradients(lambda: loss(images.value), [images], "data generation")
        optimizer.apply_gradients(zip(grads, [images]))
        return float(keras.ops.convert_to_numpy(value))

    def transform(self, images, flip, crop, size, smooth, low, high):
        x = images.value if isinstance(images, keras.Variable) else images
        if flip:
            x = K.flip(x, axis=2)
        if smooth:
            x = K.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
            x = K.depthwise_conv(x, np.repeat(smoothing_kernel()[:, :, None, None], int(x.shape[-1]), axis=2),
                                 padding="valid")
        top, left = crop if crop is not None else ((x.shape[1] - size[0]) // 2, (x.shape[2] - size[1]) // 2)
        x = x[:, top:top + size[0], left:left + size[1], :]
        if low is not None:
            x = K.minimum(K.maximum(x, np.asarray(low, np.float32)), np.asarray(high, np.float32))
        return x

    def finalize(self, images: Any) -> List[Any]:
        values = keras.ops.convert_to_numpy(images)
        return [values[i:i + 1] for i in range(len(values))]


def get_keras_data_generation_config(
        n_iter: int = DEFAULT_N_ITER, optimizer: Any = keras.optimizers.Adam, data_gen_batch_size: int = DEFAULT_DATA_GEN_BS,
        initial_lr: float = KERAS_DEFAULTS["initial_lr"],
        output_loss_multiplier: float = KERAS_DEFAULTS["output_loss_multiplier"],
        scheduler_type: SchedulerType = SchedulerType.REDUCE_ON_PLATEAU,
        bn_alignment_loss_type: BatchNormAlignemntLossType = BatchNormAlignemntLossType.L2_SQUARE,
        output_loss_type: OutputLossType = OutputLossType.NEGATIVE_MIN_MAX_DIFF,
        data_init_type: DataInitType = DataInitType.Gaussian,
        layer_weighting_type: BNLayerWeightingType = BNLayerWeightingType.AVERAGE,
        image_granularity: ImageGranularity = ImageGranularity.BatchWise,
        image_pipeline_type: ImagePipelineType = ImagePipelineType.SMOOTHING_AND_AUGMENTATION,
        image_normalization_type: ImageNormalizationType = ImageNormalizationType.KERAS_APPLICATIONS,
        extra_pixels: Union[int, Tuple[int, int]] = KERAS_DEFAULTS["extra_pixels"],
        bn_layer_types: Sequence[Any] = (keras.layers.BatchNormalization,),
        image_clipping: bool = False) -> DataGenerationConfig:
    """MCT 2.6.1's Keras data-generation configuration, its defaults (MCT's default output loss,
    REGULARIZED_MIN_MAX_DIFF, is not there yet: NEGATIVE_MIN_MAX_DIFF stands in)."""
    return DataGenerationConfig(n_iter, optimizer, data_gen_batch_size, initial_lr, output_loss_multiplier,
                                image_granularity, scheduler_type, bn_alignment_loss_type, output_loss_type,
                                data_init_type, layer_weighting_type, image_pipeline_type, image_normalization_type,
                                extra_pixels, list(bn_layer_types), [], image_clipping)


def keras_data_generation_experimental(model: Any, n_images: int, output_image_size: Any,
                                       data_generation_config: DataGenerationConfig, seed: int = 0) -> List[np.ndarray]:
    """``n_images`` images of ``output_image_size`` generated from ``model`` alone (a list of (1, H, W, C) arrays):
    feed them as representative data."""
    if not isinstance(model, keras.Model):
        raise InvalidConfigError(f"model must be a Keras model, got {type(model).__name__}")
    size = check_request(n_images, output_image_size, data_generation_config)
    shape = model.inputs[0].shape if len(model.inputs) == 1 else None
    if shape is None or len(shape) != 4:
        raise InvalidConfigError("data generation makes images: the model must take one input of shape (batch, height, "
                                 f"width, channels), got {[tuple(i.shape) for i in model.inputs]}")
    channels = int(shape[-1])
    with KERAS_LOCK:
        try:
            graph = capture(model, [np.zeros((2, *size, channels), np.float32)])
        except Exception as e:
            raise InvalidConfigError(f"the model does not run on images of {size[0]} x {size[1]} x {channels}: {e}; "
                                     "pass the output_image_size it takes") from e
        adapter = KerasAdapter(graph)
        bn_types = tuple(data_generation_config.bn_layer_types)
        targets = []
        for node in graph:
            params = adapter.batch_norm_params(node)
            if params is not None and isinstance(node.type, type) and issubclass(node.type, bn_types):
                targets.append(BatchNormTarget(node.name, node.inputs[0], np.asarray(params.mean),
                                               np.asarray(params.var)))
        built = build_model(graph, extra_outputs=[t.input_name for t in targets])
        backend = KerasGenerationBackend(built, [t.input_name for t in targets], data_generation_config.optimizer)
        return generate(backend, targets, n_images, size, channels, data_generation_config, seed)
