"""mct.data_generation's Keras facades (torch and tensorflow backends) and the generator's
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
from hwquant.data_generation.generator import (GeneratedImages, batch_norm_targets, check_request, generate,
                                               last_linear_layer, smoothing_kernel)
from hwquant.errors import InvalidConfigError
from hwquant.keras.adapter import KerasAdapter
from hwquant.keras.builder import build_model
from hwquant.keras.capture import capture
from hwquant.keras.gradients import variable_gradients

K = keras.ops


class KerasOps:
    def mean(self, x, axes):
        return K.mean(x, axis=tuple(axes))

    def moments(self, x, axes):
        return K.mean(x, axis=tuple(axes)), K.mean(K.square(x), axis=tuple(axes))

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

    def relu(self, x):
        return K.relu(x)

    def abs(self, x):
        return K.abs(x)

    def sum_rows(self, x):
        return K.sum(K.reshape(x, (x.shape[0], -1)), axis=1)

    def numpy(self, x):
        return K.convert_to_numpy(K.stop_gradient(x))


class KerasGenerationBackend:
    ops = KerasOps()
    channel_axis = -1

    def __init__(self, model: Any, watched: List[str], optimizer: Any):
        self.model, self.watched, self.optimizer_class = model, watched, optimizer

    def images(self, values: np.ndarray) -> Any:
        return keras.Variable(values, dtype="float32", trainable=True)

    def optimizer(self, images: Any, lr: float) -> Any:
        optimizer = self.optimizer_class(learning_rate=lr)
        optimizer.build([images])
        return optimizer

    def run(self, images: Any) -> Tuple[List[Any], Dict[str, Any]]:
        outputs, tensors = self.model(images, training=False)
        return keras.tree.flatten(outputs), dict(zip(self.watched, tensors))

    def step(self, images: Any, optimizer: Any, loss: Callable[[Any], Any], lr: float) -> float:
        optimizer.learning_rate = lr
        value, grads = variable_gradients(lambda: loss(images.value), [images], "data generation")
        optimizer.apply_gradients(zip(grads, [images]))
        return float(keras.ops.convert_to_numpy(value))

    def gradient_norm(self, images: Any, loss: Callable[[Any], Any]) -> float:
        _, (grad,) = variable_gradients(lambda: loss(images.value), [images], "data generation")
        return float(np.linalg.norm(keras.ops.convert_to_numpy(grad)))

    def state_bytes(self, images: Any, optimizer: Any) -> int:
        return 4 * int(np.prod(images.shape)) + sum(4 * int(np.prod(v.shape)) for v in optimizer.variables)

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
        output_loss_type: OutputLossType = KERAS_DEFAULTS["output_loss_type"],
        data_init_type: DataInitType = DataInitType.Gaussian,
        layer_weighting_type: BNLayerWeightingType = BNLayerWeightingType.AVERAGE,
        image_granularity: ImageGranularity = ImageGranularity.BatchWise,
        image_pipeline_type: ImagePipelineType = ImagePipelineType.SMOOTHING_AND_AUGMENTATION,
        image_normalization_type: ImageNormalizationType = ImageNormalizationType.KERAS_APPLICATIONS,
        extra_pixels: Union[int, Tuple[int, int]] = KERAS_DEFAULTS["extra_pixels"],
        bn_layer_types: Sequence[Any] = (keras.layers.BatchNormalization,),
        image_clipping: bool = False) -> DataGenerationConfig:
    """MCT 2.6.1's Keras data-generation configuration, its defaults but two (n_iter 500 and batches of 32 as for
    PyTorch; the output loss NEGATIVE_MIN_MAX_DIFF, not MCT's REGULARIZED_MIN_MAX_DIFF, measured better: see
    hwquant.data_generation.config). The last-layer types of the regularized loss, Dense and Conv2D, are fixed as
    in MCT."""
    return DataGenerationConfig(n_iter, optimizer, data_gen_batch_size, initial_lr, output_loss_multiplier,
                                image_granularity, scheduler_type, bn_alignment_loss_type, output_loss_type,
                                data_init_type, layer_weighting_type, image_pipeline_type, image_normalization_type,
                                extra_pixels, list(bn_layer_types), [keras.layers.Dense, keras.layers.Conv2D],
                                image_clipping)


def keras_data_generation_experimental(model: Any, n_images: int, output_image_size: Any,
                                       data_generation_config: DataGenerationConfig, seed: int = 0) -> GeneratedImages:
    """``n_images`` images of ``output_image_size`` generated from ``model`` alone (a list of (1, H, W, C) arrays;
    ``.report`` says what was used and what it cost): feed them as representative data."""
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
            probe = np.zeros((2, *size, channels), np.float32)
            model(probe, training=False)  # (the capture alone does not run every layer's shape checks)
            graph = capture(model, [probe])
        except Exception as e:
            raise InvalidConfigError(f"the model does not run on images of {size[0]} x {size[1]} x {channels}: {e}; "
                                     "pass the output_image_size it takes") from e
        adapter = KerasAdapter(graph)
        bn_types = tuple(data_generation_config.bn_layer_types)
        last_types = tuple(data_generation_config.last_layer_types)
        last = last_linear_layer(graph, lambda n: isinstance(n.type, type) and issubclass(n.type, last_types)
                                 and "kernel" in n.weights,
                                 lambda n: adapter.batch_norm_params(n) is not None, _unit_norms)
        targets, ignored = batch_norm_targets(
            graph, adapter, lambda n: isinstance(n.type, type) and issubclass(n.type, bn_types),
            lambda n: getattr(n.type, "__name__", str(n.type)), ", ".join(t.__name__ for t in bn_types), last)
        watched = list(dict.fromkeys([t.watched for t in targets]
                                     + ([last.input_name, last.output_name] if last is not None else [])))
        built = build_model(graph, extra_outputs=watched)
        backend = KerasGenerationBackend(built, watched, data_generation_config.optimizer)
        return generate(backend, targets, n_images, size, channels, data_generation_config, seed, last, ignored)


def _unit_norms(node: Any) -> np.ndarray:
    """Each output unit's weight norm (Keras kernels keep the output units last)."""
    kernel = np.asarray(node.weights["kernel"])
    return np.linalg.norm(kernel.reshape(-1, kernel.shape[-1]), axis=0)
