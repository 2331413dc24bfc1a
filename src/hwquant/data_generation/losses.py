"""The losses of data generation, written once over a small set of tensor operations each framework gives
(``ops``: mean over axes, sums, amax / amin over an axis, sqrt, abs, relu, reshape, constants, a detached copy;
the rest is Python's arithmetic on the framework's tensors), so the same formulas run under torch's autograd and Keras' backends.

- Batch-norm alignment (MCT's L2_SQUARE): for each batch-norm layer, the squared L2 distance between the
  per-channel mean of its input and the stored running mean, and between the input's standard deviation and the
  stored one, each over the channel count. The statistics are the batch's, each image's (ImageWise), or all
  images' (AllImages: the other batches' last statistics held fixed), from means and second moments.
- The layers' weights: AVERAGE (1 / number of layers), FIRST_LAYER_MULTIPLIER (10 for the first, 1 after), GRAD
  (the inverse of each layer's gradient norm on the images; MCT 2.6.1 names it but has no implementation).
- Output losses on the model's outputs, per image flattened: NEGATIVE_MIN_MAX_DIFF (minus the mean of max - min),
  INVERSE_MIN_MAX_DIFF (1 / the mean of max - min + eps), REGULARIZED_MIN_MAX_DIFF (on the last linear layer,
  with a bound from its weights), NONE."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from hwquant.data_generation.config import BNLayerWeightingType, OutputLossType

EPS = 1e-6
FIRST_LAYER_MULTIPLIER = 10.0


class TensorOps(Protocol):
    def mean(self, x: Any, axes: Sequence[int]) -> Any: ...

    def moments(self, x: Any, axes: Sequence[int]) -> Tuple[Any, Any]:
        """(mean, mean of the squares) over ``axes``: the statistics of every batch norm's input, the bulk of the
        step's work after the model itself, so a framework may fuse them."""

    def sum(self, x: Any) -> Any: ...

    def amax(self, x: Any, axis: int) -> Any: ...

    def amin(self, x: Any, axis: int) -> Any: ...

    def sqrt(self, x: Any) -> Any: ...

    def reshape(self, x: Any, shape: Sequence[int]) -> Any: ...

    def constant(self, value: np.ndarray, like: Any) -> Any: ...

    def relu(self, x: Any) -> Any: ...

    def abs(self, x: Any) -> Any: ...

    def sum_rows(self, x: Any) -> Any:
        """Sum over every axis but the first."""

    def numpy(self, x: Any) -> np.ndarray:
        """The values, detached from the gradient."""


class NumpyOps:
    """The operations on numpy arrays (tests, and a reference for the frameworks')."""

    def mean(self, x, axes):
        return np.mean(x, axis=tuple(axes))

    def moments(self, x, axes):
        return np.mean(x, axis=tuple(axes)), np.mean(np.square(x), axis=tuple(axes))

    def sum(self, x):
        return np.sum(x)

    def amax(self, x, axis):
        return np.max(x, axis=axis)

    def amin(self, x, axis):
        return np.min(x, axis=axis)

    def sqrt(self, x):
        return np.sqrt(x)

    def reshape(self, x, shape):
        return np.reshape(x, shape)

    def constant(self, value, like):
        return np.asarray(value, dtype=np.asarray(like).dtype)

    def relu(self, x):
        return np.maximum(x, 0)

    def abs(self, x):
        return np.abs(x)

    def sum_rows(self, x):
        return np.sum(np.reshape(x, (np.shape(x)[0], -1)), axis=1)

    def numpy(self, x):
        return np.asarray(x)


def batch_stats(ops: TensorOps, x: Any, channel_axis: int, per_image: bool) -> Tuple[Any, Any]:
    """(mean, second moment) of ``x`` per channel, over the batch and the spatial axes, or (``per_image``) over
    the spatial axes only, one row per image."""
    rank = len(x.shape)
    axes = [a for a in range(rank) if a != channel_axis % rank and not (per_image and a == 0)]
    return ops.moments(x, axes)


def spatial_mean(ops: TensorOps, x: Any, channel_axis: int) -> Any:
    """Each image's mean over the spatial axes (a row of channels per image; a flat tensor as it is)."""
    rank = len(x.shape)
    return x if rank == 2 else ops.mean(x, [a for a in range(1, rank) if a != channel_axis % rank])


def bn_alignment(ops: TensorOps, mean: Any, second_moment: Any, running_mean: np.ndarray, running_var: np.ndarray,
                 eps: float = EPS, folded_scale: Optional[np.ndarray] = None,
                 folded_shift: Optional[np.ndarray] = None) -> Any:
    """MCT's L2_SQUARE loss of one batch-norm layer whose input has these statistics: the squared L2 distance of
    the means, and of the standard deviations, each over the channel count (rows of images summed).

    Folded (``folded_scale`` s, ``folded_shift`` beta): the statistics are of the batch norm's output y = s (x -
    mean) + beta, whose layer has the batch norm folded in; the same loss, written in y's scale: the input's mean
    is off by (mean_y - beta) / s and its spread by (std_y - |s| std) / |s|."""
    std = ops.sqrt(ops.relu(second_moment - mean * mean) + eps)
    target_std_np = np.sqrt(np.asarray(running_var, np.float64) + eps)
    if folded_scale is None:
        target_mean_np, weight = np.asarray(running_mean, np.float64), None
    else:
        scale = np.asarray(folded_scale, np.float64)
        target_mean_np, target_std_np = np.asarray(folded_shift, np.float64), np.abs(scale) * target_std_np
        weight = ops.constant((1.0 / scale ** 2).astype(np.float32), mean)
    target_mean = ops.constant(target_mean_np.astype(np.float32), mean)
    target_std = ops.constant(target_std_np.astype(np.float32), std)
    channels = float(np.size(running_mean))
    d_mean, d_std = mean - target_mean, std - target_std
    squares = d_mean * d_mean + d_std * d_std
    return ops.sum(squares if weight is None else squares * weight) / channels


def layer_weights(kind: BNLayerWeightingType, names: List[str],
                  gradient_norms: Optional[Sequence[float]] = None) -> Dict[str, float]:
    """Each batch-norm layer's weight in the alignment loss. GRAD: the inverse of the norm of the layer's loss
    gradient on the images, normalised to sum 1, so that every layer moves the images as much (a layer whose
    gradient vanishes gets the weight of the smallest measured one)."""
    if kind == BNLayerWeightingType.AVERAGE:
        return {n: 1.0 / len(names) for n in names}
    if kind == BNLayerWeightingType.FIRST_LAYER_MULTIPLIER:
        return {n: FIRST_LAYER_MULTIPLIER if i == 0 else 1.0 for i, n in enumerate(names)}
    if gradient_norms is None:
        raise ValueError("GRAD weighting needs each layer's gradient norm")
    norms = np.asarray(gradient_norms, np.float64)
    finite = norms[np.isfinite(norms) & (norms > 0)]
    floor = finite.min() if finite.size else 1.0
    inverse = 1.0 / np.where(np.isfinite(norms) & (norms > 0), norms, floor)
    return {n: float(w) for n, w in zip(names, inverse / inverse.sum())}


@dataclass
class LastLayer:
    """The model's last linear layer not followed by a batch norm (REGULARIZED_MIN_MAX_DIFF reads it)."""
    name: str
    input_name: str              # its input tensor
    output_name: str             # its output tensor
    weight_norms: np.ndarray     # the L2 norm of each output unit's weights


# the share of the Cauchy-Schwarz bound |w . x| <= |w| |x| that the extreme outputs are drawn to (MCT's PyTorch value)
REGULARIZED_BOUND_SHARE = 0.5


def output_loss(ops: TensorOps, kind: OutputLossType, outputs: Sequence[Any], last_output: Any = None,
                last_layer: Optional[LastLayer] = None, last_input_feature: Any = None, channel_axis: int = 1) -> Any:
    """The output loss over every output (0 for NONE). REGULARIZED_MIN_MAX_DIFF (MCT's Keras default) works on the
    last linear layer's output: the inverse of its range, plus, for its largest and smallest unit, how far the
    unit's magnitude is from half the bound the layer's input allows (the norm of ``last_input_feature``, the input's
    spatial mean, one row per image, times the unit's weight norm), which keeps the range from growing without
    limit. (MCT's PyTorch formula; its Keras one reads the last batch norm's input instead, a tensor of another
    scale: measured on MobileNetV2, it drove the logits down and calibration with them.)"""
    total: Any = 0.0
    if kind == OutputLossType.NONE:
        return total
    if kind == OutputLossType.REGULARIZED_MIN_MAX_DIFF:
        if last_layer is None or last_output is None:
            raise ValueError("REGULARIZED_MIN_MAX_DIFF needs the last linear layer")
        out = spatial_mean(ops, last_output, channel_axis)  # (a convolution: each unit's spatial mean)
        high, low = ops.amax(out, 1), ops.amin(out, 1)
        dynamic = 1.0 / (high - low + EPS)
        if last_input_feature is None:
            return ops.mean(dynamic, [0])
        feature_norm = ops.sqrt(ops.sum_rows(last_input_feature * last_input_feature)) * REGULARIZED_BOUND_SHARE
        values = ops.numpy(out)
        norm_high = ops.constant(last_layer.weight_norms[np.argmax(values, 1)], high)
        norm_low = ops.constant(last_layer.weight_norms[np.argmin(values, 1)], low)
        reg_high = ops.abs(ops.abs(high) - feature_norm * norm_high)
        reg_low = ops.abs(ops.abs(low) - feature_norm * norm_low)
        return ops.mean(reg_high + reg_low + dynamic, [0])
    for out in outputs:
        flat = ops.reshape(out, (out.shape[0], -1))
        spread = ops.amax(flat, 1) - ops.amin(flat, 1)
        if kind == OutputLossType.NEGATIVE_MIN_MAX_DIFF:
            total = total - ops.mean(spread, [0])
        else:  # INVERSE_MIN_MAX_DIFF
            total = total + 1.0 / (ops.mean(spread, [0]) + EPS)
    return total
