"""Gradients of a scalar with respect to tensors of a Keras model's call, on the backend Keras runs on
(Keras 3 has no backend-neutral gradient function): torch's autograd, TensorFlow's GradientTape. JAX
needs the model's stateless call traced as a whole, which hwquant does not do: refused plainly."""
from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple

import keras
import numpy as np

from hwquant.errors import InvalidConfigError


def gradients(forward: Callable[[List[Any]], Tuple[Any, Sequence[Any]]], inputs: Sequence[np.ndarray],
              what: str) -> List[Any]:
    """``forward(input tensors) -> (scalar, tensors)``: the scalar's gradient with respect to each of
    the tensors, as numpy arrays (None for a tensor the scalar does not depend on). ``what`` names the
    feature in the error raised on a backend without gradients here."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        with torch.enable_grad():
            xs = [torch.as_tensor(x).to(keras.ops.convert_to_tensor(0.0).device).requires_grad_(x.dtype.kind == "f")
                  for x in inputs]
            loss, tensors = forward(xs)
            grads = torch.autograd.grad(loss, list(tensors), allow_unused=True)
        return [None if g is None else g.detach().cpu().numpy() for g in grads]
    if backend == "tensorflow":
        import tensorflow as tf

        xs = [tf.convert_to_tensor(x) for x in inputs]
        with tf.GradientTape() as tape:
            for x in xs:
                if x.dtype.is_floating:
                    tape.watch(x)
            loss, tensors = forward(xs)
        grads = tape.gradient(loss, list(tensors), unconnected_gradients=tf.UnconnectedGradients.NONE)
        return [None if g is None else g.numpy() for g in grads]
    raise InvalidConfigError(f"{what} needs gradients through the Keras model, which hwquant computes on the torch "
                             f"and tensorflow backends, not on '{backend}': set KERAS_BACKEND to one of them")
