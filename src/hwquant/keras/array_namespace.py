"""keras.ops for core/numerics/quant_math.py (registered when hwquant.keras loads): Keras' symbolic tensors,
variables and the tensors of whichever backend Keras runs on. Rounding is half-to-even on every
backend (torch.round, tf.round, jnp.round)."""
from __future__ import annotations

from typing import Optional

import keras
import numpy as np
from keras import ops

from hwquant.core.numerics import quant_math

_HALF = ("float16", "bfloat16")


def _dtype(x) -> str:
    return keras.backend.standardize_dtype(x.dtype)


class KerasNamespace(quant_math.ArrayNamespace):
    ops = keras.ops
    module = None  # no lookup-table search on Keras tensors (their quantizers run it in numpy)

    def owns(self, x) -> bool:
        return isinstance(x, (keras.KerasTensor, keras.Variable)) or ops.is_tensor(x)

    def to_numpy(self, v) -> np.ndarray:
        return np.asarray(ops.convert_to_numpy(v))

    def prepare(self, x):
        dtype = _dtype(x)
        if dtype in _HALF:
            return ops.cast(x, "float32"), dtype
        if not dtype.startswith("float"):
            return ops.cast(x, keras.config.floatx()), keras.config.floatx()
        return x, dtype

    def cast(self, y, dtype):
        return y if _dtype(y) == dtype else ops.cast(y, dtype)

    def param(self, value, like):
        if self.owns(value):
            return ops.cast(value, _dtype(like))
        return ops.convert_to_tensor(np.asarray(quant_math._to_numpy(value)), dtype=_dtype(like))

    def astype(self, x, dtype: str):
        return ops.cast(x, dtype)

    def stop_gradient(self, x):
        return ops.stop_gradient(x)

    def broadcast_to(self, x, shape):
        return ops.broadcast_to(x, shape)

    def sum_to(self, t, like, axis: Optional[int]):
        rank = len(t.shape)
        if int(np.prod(like.shape)) == 1 or axis is None:
            return ops.reshape(ops.sum(t), like.shape)
        return ops.reshape(ops.sum(t, axis=[d for d in range(rank) if d != axis % rank]), like.shape)

    def power_of_two_ceil(self, t, min_threshold: float):
        # 2**ceil(log2 t) from a float log2, then corrected by one exact doubling / halving either way
        t = ops.maximum(t, min_threshold)
        p = ops.power(2.0, ops.ceil(ops.log2(t)))
        p = ops.where(ops.greater_equal(p / 2, t), p / 2, p)
        return ops.where(ops.less(p, t), p * 2, p)


quant_math.register_namespace(KerasNamespace())


class KerasOps:
    """The tensor operations of the framework-free training losses (gptq/training.py's GPTQOps) on Keras
    tensors (channels last); the samples and the teacher cache stay numpy arrays, handed to the models as tensors."""
    channel_axis = -1
    square, sigmoid, abs, stack = (staticmethod(f) for f in (ops.square, ops.sigmoid, ops.abs, ops.stack))
    reshape, clip, power = (staticmethod(f) for f in (ops.reshape, ops.clip, ops.power))

    def mean(self, x, axis=None):
        return ops.mean(x, axis=axis)

    def sum(self, x, axis=None):
        return ops.sum(x, axis=axis)

    def max(self, x):
        return ops.max(x)

    def maximum(self, x, floor):
        return ops.maximum(x, floor)

    def like(self, x, other):
        return ops.cast(ops.convert_to_tensor(x), other.dtype)

    def concat(self, parts):
        return np.concatenate([np.asarray(ops.convert_to_numpy(p)) for p in parts])

    def take(self, x, rows):
        return ops.convert_to_tensor(np.asarray(x)[rows])

    def nbytes(self, x):
        return int(np.prod(x.shape)) * np.dtype(keras.backend.standardize_dtype(x.dtype)).itemsize


OPS = KerasOps()
