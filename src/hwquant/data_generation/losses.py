"""The losses of data generation, written once over a small set of tensor operations each framework gives
(``ops``: mean / var over axes, sum, amax / amin over an axis, sqrt, reshape; the rest is Python's arithmetic on the
framework's tensors), so the same formulas run under torch's autograd and Keras' backends.

- Batch-norm alignment (MCT's L2_SQUARE): for each batch-norm layer, the squared L2 distance between the
  per-channel mean of its input and the stored running mean, and between the input's standard deviation and the
  stored one, each over the channel count.
- The layers' weights: AVERAGE (1 / number of layers), FIRST_LAYER_MULTIPLIER (10 for the first, 1 after).
- Output losses on the model's outputs, per image flattened: NEGATIVE_MIN_MAX_DIFF (minus the mean of max - min),
  INVERSE_MIN_MAX_DIFF (1 / the mean of max - min + eps), NONE."""
from __future__ import annotations

from typing import Any, Dict, List, Protocol, Sequence

import numpy as np

from hwquant.data_generation.config import BNLayerWeightingType, OutputLossType

EPS = 1e-6
FIRST_LAYER_MULTIPLIER = 10.0


class TensorOps(Protocol):
    def mean(self, x: Any, axes: Sequence[int]) -> Any: ...

    def var(self, x: Any, axes: Sequence[int]) -> Any: ...

    def sum(self, x: Any) -> Any: ...

    def amax(self, x: Any, axis: int) -> Any: ...

    def amin(self, x: Any, axis: int) -> Any: ...

    def sqrt(self, x: Any) -> Any: ...

    def reshape(self, x: Any, shape: Sequence[int]) -> Any: ...

    def constant(self, value: np.ndarray, like: Any) -> Any: ...


class NumpyOps:
    """The operations on numpy arrays (tests, and a reference for the frameworks')."""

    def mean(self, x, axes):
        return np.mean(x, axis=tuple(axes))

    def var(self, x, axes):
        return np.var(x, axis=tuple(axes))

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


def bn_alignment(ops: TensorOps, x: Any, channel_axis: int, running_mean: np.ndarray, running_var: np.ndarray,
                 eps: float = 0.0) -> Any:
    """MCT's L2_SQUARE loss of one batch-norm layer whose input is ``x``."""
    axes = [a for a in range(len(x.shape)) if a != channel_axis % len(x.shape)]
    mean, std = ops.mean(x, axes), ops.sqrt(ops.var(x, axes) + eps)
    target_mean = ops.constant(np.asarray(running_mean, np.float32), mean)
    target_std = ops.constant(np.sqrt(np.asarray(running_var, np.float32) + eps), std)
    channels = float(np.size(running_mean))
    d_mean, d_std = mean - target_mean, std - target_std
    return ops.sum(d_mean * d_mean) / channels + ops.sum(d_std * d_std) / channels


def layer_weights(kind: BNLayerWeightingType, names: List[str]) -> Dict[str, float]:
    if kind == BNLayerWeightingType.AVERAGE:
        return {n: 1.0 / len(names) for n in names}
    if kind == BNLayerWeightingType.FIRST_LAYER_MULTIPLIER:
        return {n: FIRST_LAYER_MULTIPLIER if i == 0 else 1.0 for i, n in enumerate(names)}
    raise ValueError(f"layer weighting {kind.name} is computed from gradients, not here")


def output_loss(ops: TensorOps, kind: OutputLossType, outputs: Sequence[Any]) -> Any:
    """The output loss over every output (0 for NONE)."""
    total: Any = 0.0
    if kind == OutputLossType.NONE:
        return total
    for out in outputs:
        flat = ops.reshape(out, (out.shape[0], -1))
        spread = ops.amax(flat, 1) - ops.amin(flat, 1)
        if kind == OutputLossType.NEGATIVE_MIN_MAX_DIFF:
            total = total - ops.mean(spread, [0])
        elif kind == OutputLossType.INVERSE_MIN_MAX_DIFF:
            total = total + 1.0 / (ops.mean(spread, [0]) + EPS)
        else:
            raise ValueError(f"output loss {kind.name} needs the last layer's weights: the framework's generator "
                             "computes it")
    return total
