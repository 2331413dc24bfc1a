"""mct.data_generation's PyTorch facades and the generator's PyTorch back end: the
float model built from its graph with its batch-norm inputs as extra outputs, torch's tensor operations for
the losses, one optimiser step on the images, the image pipeline."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hwquant.concurrency import framework_call
from hwquant.data_generation.config import (DEFAULT_DATA_GEN_BS, DEFAULT_N_ITER, PYTORCH_DEFAULTS,
                                            BatchNormAlignemntLossType, BNLayerWeightingType, DataGenerationConfig,
                                            DataInitType, ImageGranularity, ImageNormalizationType,
                                            ImagePipelineType, OutputLossType, SchedulerType)
from hwquant.data_generation.generator import (GeneratedImages, batch_norm_targets, check_request, generate, last_linear_layer,
                                               smoothing_kernel)
from hwquant.errors import InvalidConfigError
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.builder import build_module
from hwquant.torch.capture.routes import capture


class _Moments(torch.autograd.Function):
    """(mean, mean of squares) over ``axes`` in one reduction each and one fused backward pass (autograd's own
    graph for x.mean() and (x * x).mean() makes five passes over every batch-norm input, more than half a step)."""

    @staticmethod
    def forward(ctx, x, axes):
        count = x.numel() // math.prod(s for a, s in enumerate(x.shape) if a not in axes)
        ctx.save_for_backward(x)
        ctx.axes, ctx.count = axes, count
        mean = x.mean(dim=axes)
        if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
            second = (x * x).mean(dim=axes)  # (the norm's reduction is slow over a channels-last layout)
        else:
            second = torch.linalg.vector_norm(x, 2, dim=axes).square_().div_(count)
        return mean, second

    @staticmethod
    def backward(ctx, grad_mean, grad_second):
        (x,) = ctx.saved_tensors
        shape = [1 if a in ctx.axes else s for a, s in enumerate(x.shape)]
        g_mean = (grad_mean if grad_mean is not None else torch.zeros((), dtype=x.dtype)).reshape(shape) / ctx.count
        if grad_second is None:
            return g_mean.expand_as(x), None
        return torch.addcmul(g_mean, x, grad_second.reshape(shape), value=2.0 / ctx.count), None


class TorchOps:
    def mean(self, x, axes):
        return x.mean(dim=tuple(axes))

    def moments(self, x, axes):
        return _Moments.apply(x, tuple(a % x.dim() for a in axes))

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

    def relu(self, x):
        return torch.relu(x)

    def abs(self, x):
        return torch.abs(x)

    def sum_rows(self, x):
        return x.reshape(x.shape[0], -1).sum(dim=1)

    def numpy(self, x):
        return x.detach().cpu().numpy()


class TorchGenerationBackend:
    ops = TorchOps()
    channel_axis = 1

    def __init__(self, model: nn.Module, watched: List[str], optimizer: Any, device: torch.device):
        self.model, self.watched, self.optimizer_class, self.device = model, watched, optimizer, device

    def images(self, values: np.ndarray) -> torch.Tensor:
        return torch.tensor(values, device=self.device, requires_grad=True)

    def optimizer(self, images: torch.Tensor, lr: float) -> Any:
        return self.optimizer_class([images], lr=lr)

    def run(self, images: torch.Tensor) -> Tuple[List[Any], Dict[str, Any]]:
        if images.dim() == 4:  # (channels-last convolutions: faster on CPU and GPU)
            images = images.contiguous(memory_format=torch.channels_last)
        outputs, tensors = self.model(images)
        flat = [o for o in torch.utils._pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
        return flat, dict(zip(self.watched, tensors))

    def step(self, images: torch.Tensor, optimizer: Any, loss: Callable[[Any], Any], lr: float) -> float:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        value = loss(images)
        value.backward()
        optimizer.step()
        return float(value.detach())

    def gradient_norm(self, images: torch.Tensor, loss: Callable[[Any], Any]) -> float:
        (grad,) = torch.autograd.grad(loss(images), [images], allow_unused=True)
        return 0.0 if grad is None else float(grad.norm())

    def state_bytes(self, images: torch.Tensor, optimizer: Any) -> int:
        state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        return images.nbytes + sum(v.nbytes for v in state)

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
        output_loss_type: OutputLossType = PYTORCH_DEFAULTS["output_loss_type"],
        data_init_type: DataInitType = DataInitType.Gaussian,
        layer_weighting_type: BNLayerWeightingType = BNLayerWeightingType.AVERAGE,
        image_granularity: ImageGranularity = ImageGranularity.AllImages,
        image_pipeline_type: ImagePipelineType = ImagePipelineType.SMOOTHING_AND_AUGMENTATION,
        image_normalization_type: ImageNormalizationType = ImageNormalizationType.TORCHVISION,
        extra_pixels: Union[int, Tuple[int, int]] = PYTORCH_DEFAULTS["extra_pixels"],
        bn_layer_types: Sequence[Any] = (nn.BatchNorm2d,), last_layer_types: Sequence[Any] = (nn.Linear, nn.Conv2d),
        image_clipping: bool = True) -> DataGenerationConfig:
    """MCT 2.6.1's PyTorch data-generation configuration, its defaults but three: n_iter 500 and batches of 32 for
    MCT's 1500 and 256 (the run's time and memory grow with both; raise them for the last point of fidelity), and
    an output loss multiplier of 1e-3 for MCT's 1e-5 (measured better: see hwquant.data_generation.config)."""
    return DataGenerationConfig(n_iter, optimizer, data_gen_batch_size, initial_lr, output_loss_multiplier,
                                image_granularity, scheduler_type, bn_alignment_loss_type, output_loss_type,
                                data_init_type, layer_weighting_type, image_pipeline_type, image_normalization_type,
                                extra_pixels, list(bn_layer_types), list(last_layer_types), image_clipping)


def _input_channels(model: nn.Module, size: Tuple[int, int], device: Any) -> int:
    """The channels the model's images have: those its first convolution reads where the model runs on them, else 3
    or 1 (a space-to-depth stem, YOLOX's Focus, makes the first convolution read 12 of 3)."""
    first = next((m for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)), None)
    candidates = list(dict.fromkeys(([int(first.in_channels)] if first is not None else []) + [3, 1]))
    for channels in candidates:
        try:
            with torch.no_grad():
                model(torch.zeros(1, channels, *size, device=device))
            return channels
        except Exception:  # (the next candidate; the capture below says what fails)
            continue
    return candidates[0]


@framework_call
def pytorch_data_generation_experimental(model: nn.Module, n_images: int, output_image_size: Any,
                                         data_generation_config: DataGenerationConfig,
                                         seed: int = 0) -> GeneratedImages:
    """``n_images`` images of ``output_image_size`` generated from ``model`` alone (a list of (1, C, H, W)
    tensors, MCT's form; ``.report`` says what was used and what it cost): feed them as representative data."""
    if not isinstance(model, nn.Module):
        raise InvalidConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    size = check_request(n_images, output_image_size, data_generation_config)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    channels = _input_channels(model.eval(), size, device)
    try:
        graph = capture(model.eval(), [torch.zeros(2, channels, *size, device=device)])
    except Exception as e:
        raise InvalidConfigError(f"the model does not run on images of {channels} x {size[0]} x {size[1]}: {e}; pass "
                                 "the output_image_size it takes") from e
    adapter = PytorchAdapter(device=device)
    bn_types = tuple(data_generation_config.bn_layer_types)
    last_types = tuple(data_generation_config.last_layer_types)
    last = last_linear_layer(graph, lambda n: isinstance(n.call_target, last_types)
                             and getattr(n.call_target, "weight", None) is not None,
                             lambda n: adapter.batch_norm_params(n) is not None, lambda n: _unit_norms(n.call_target))
    targets, ignored = batch_norm_targets(
        graph, adapter, lambda n: isinstance(n.call_target, bn_types),
        lambda n: type(n.call_target).__name__ if isinstance(n.call_target, nn.Module) else str(n.call_target),
        ", ".join(t.__name__ for t in bn_types), last)
    watched = list(dict.fromkeys([t.watched for t in targets]
                                 + ([last.input_name, last.output_name] if last is not None else [])))
    built = build_module(graph, extra_outputs=watched).to(device).eval()
    if len(size) == 2:
        built = built.to(memory_format=torch.channels_last)
    for p in built.parameters():
        p.requires_grad_(False)  # (only the images learn; no gradient is kept for the weights)
    backend = TorchGenerationBackend(built, watched, data_generation_config.optimizer, device)
    return generate(backend, targets, n_images, size, channels, data_generation_config, seed, last, ignored)


def _unit_norms(layer: nn.Module) -> np.ndarray:
    weight = layer.weight.detach().cpu().numpy()
    if isinstance(layer, nn.modules.conv._ConvTransposeNd):
        weight = np.moveaxis(weight, 1, 0)
    return np.linalg.norm(weight.reshape(weight.shape[0], -1), axis=1)
