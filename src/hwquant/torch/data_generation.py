"""mct.data_generation's PyTorch facades (issue 32, in progress) and the generator's PyTorch back end: the
float model built from its graph with its batch-norm inputs as extra outputs, torch's tensor operations for
the losses, one optimiser step on the images, the image pipeline."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hwquant.data_generation.config import (DEFAULT_DATA_GEN_BS, DEFAULT_N_ITER, PYTORCH_DEFAULTS,
                                            BatchNormAlignemntLossType, BNLayerWeightingType, DataGenerationConfig,
                                            DataInitType, ImageGranularity, ImageNormalizationType,
                                            ImagePipelineType, OutputLossType, SchedulerType)
from hwquant.data_generation.generator import BatchNormTarget, check_request, generate, smoothing_kernel
from hwquant.errors import InvalidConfigError
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.builder import build_module
from hwquant.torch.capture import capture


class TorchOps:
    def mean(self, x, axes):
        return x.mean(dim=tuple(axes))

    def var(self, x, axes):
        return x.var(dim=tuple(axes), unbiased=False)

    def sum(self, x):
        return x.sum()

    def amax(self, x, axis):
        return x.amax(dim=axis)

    def amin(self, x, axis):
        return x.amin(dim=axis)

    def sqrt(self, x):
        return torch.sqrt(x)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def constant(self, value, like):
        return torch.as_tensor(value, dtype=like.dtype, device=like.device)


class TorchGenerationBackend:
    ops = TorchOps()
    channel_axis = 1

    def __init__(self, model: nn.Module, bn_inputs: List[str], optimizer: Any, device: torch.device):
        self.model, self.bn_inputs, self.optimizer_class, self.device = model, bn_inputs, optimizer, device
        self._optimizer: Tuple[Any, Any] = (None, None)  # (the images it steps, the optimizer): one batch at a time

    def images(self, values: np.ndarray) -> torch.Tensor:
        return torch.tensor(values, device=self.device, requires_grad=True)

    def run(self, images: torch.Tensor) -> Tuple[List[Any], Dict[str, Any]]:
        outputs, tensors = self.model(images)
        flat = [o for o in torch.utils._pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
        return flat, dict(zip(self.bn_inputs, tensors))

    def step(self, images: torch.Tensor, loss: Callable[[Any], Any], lr: float) -> float:
        if self._optimizer[0] is not images:  # (a new batch: the last one's optimizer state is let go)
            self._optimizer = (images, self.optimizer_class([images], lr=lr))
        optimizer = self._optimizer[1]
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        value = loss(images)
        value.backward()
        optimizer.step()
        return float(value.detach())

    def transform(self, images, flip, crop, size, smooth, low, high):
        x = torch.flip(images, dims=[3]) if flip else images
        if smooth:
            kernel = torch.as_tensor(smoothing_kernel(), device=x.device).expand(x.shape[1], 1, 3, 3)
            x = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), kernel, groups=x.shape[1])
        top, left = crop if crop is not None else ((x.shape[2] - size[0]) // 2, (x.shape[3] - size[1]) // 2)
        x = x[:, :, top:top + size[0], left:left + size[1]]
        if low is not None:
            shape = (1, -1, 1, 1)
            x = torch.clamp(x, torch.as_tensor(low, dtype=x.dtype, device=x.device).reshape(shape),
                            torch.as_tensor(high, dtype=x.dtype, device=x.device).reshape(shape))
        return x

    def finalize(self, images: torch.Tensor) -> List[torch.Tensor]:
        return list(images.detach().split(1))


def get_pytorch_data_generation_config(
        n_iter: int = DEFAULT_N_ITER, optimizer: Any = torch.optim.RAdam, data_gen_batch_size: int = DEFAULT_DATA_GEN_BS,
        initial_lr: float = PYTORCH_DEFAULTS["initial_lr"],
        output_loss_multiplier: float = PYTORCH_DEFAULTS["output_loss_multiplier"],
        scheduler_type: SchedulerType = SchedulerType.REDUCE_ON_PLATEAU_WITH_RESET,
        bn_alignment_loss_type: BatchNormAlignemntLossType = BatchNormAlignemntLossType.L2_SQUARE,
        output_loss_type: OutputLossType = OutputLossType.NEGATIVE_MIN_MAX_DIFF,
        data_init_type: DataInitType = DataInitType.Gaussian,
        layer_weighting_type: BNLayerWeightingType = BNLayerWeightingType.AVERAGE,
        image_granularity: ImageGranularity = ImageGranularity.AllImages,
        image_pipeline_type: ImagePipelineType = ImagePipelineType.SMOOTHING_AND_AUGMENTATION,
        image_normalization_type: ImageNormalizationType = ImageNormalizationType.TORCHVISION,
        extra_pixels: Union[int, Tuple[int, int]] = PYTORCH_DEFAULTS["extra_pixels"],
        bn_layer_types: Sequence[Any] = (nn.BatchNorm2d,), last_layer_types: Sequence[Any] = (nn.Linear, nn.Conv2d),
        image_clipping: bool = True) -> DataGenerationConfig:
    """MCT 2.6.1's PyTorch data-generation configuration, its defaults."""
    return DataGenerationConfig(n_iter, optimizer, data_gen_batch_size, initial_lr, output_loss_multiplier,
                                image_granularity, scheduler_type, bn_alignment_loss_type, output_loss_type,
                                data_init_type, layer_weighting_type, image_pipeline_type, image_normalization_type,
                                extra_pixels, list(bn_layer_types), list(last_layer_types), image_clipping)


def _input_channels(model: nn.Module) -> int:
    """The channels the model's first convolution reads (3 where it has none)."""
    first = next((m for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)), None)
    return int(first.in_channels) if first is not None else 3


def pytorch_data_generation_experimental(model: nn.Module, n_images: int, output_image_size: Any,
                                         data_generation_config: DataGenerationConfig,
                                         seed: int = 0) -> List[torch.Tensor]:
    """``n_images`` images of ``output_image_size`` generated from ``model`` alone (a list of (1, C, H, W)
    tensors, MCT's form): feed them as representative data."""
    if not isinstance(model, nn.Module):
        raise InvalidConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    size = check_request(n_images, output_image_size, data_generation_config)
    channels = _input_channels(model)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    try:
        graph = capture(model.eval(), [torch.zeros(2, channels, *size, device=device)])
    except Exception as e:
        raise InvalidConfigError(f"the model does not run on images of {channels} x {size[0]} x {size[1]}: {e}; pass "
                                 "the output_image_size it takes") from e
    adapter = PytorchAdapter(device=device)
    bn_types = tuple(data_generation_config.bn_layer_types)
    targets = []
    for node in graph:
        params = adapter.batch_norm_params(node)
        if params is not None and isinstance(node.call_target, bn_types):
            targets.append(BatchNormTarget(node.name, node.inputs[0], np.asarray(params.mean), np.asarray(params.var)))
    built = build_module(graph, extra_outputs=[t.input_name for t in targets]).to(device).eval()
    backend = TorchGenerationBackend(built, [t.input_name for t in targets], data_generation_config.optimizer, device)
    return generate(backend, targets, n_images, size, channels, data_generation_config, seed)
