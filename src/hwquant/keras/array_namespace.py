"""keras.ops for core/quant_math.py (registered when hwquant.keras loads): Keras' symbolic tensors,
variables and the tensors of whichever backend Keras runs on. Rounding is half-to-even on every
backend (torch.round, tf.round, jnp.round)."""
from __future__ import annotations

from typing import Optional

import keras
import numpy as np
from keras import ops

from hwquant.core import quant_math

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
