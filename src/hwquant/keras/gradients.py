"""Gradients through a Keras model's call, on the backend Keras runs on (Keras 3 has no backend-neutral
gradient function): torch's autograd, TensorFlow's GradientTape. JAX needs the model's stateless call
traced as a whole, which hwquant does not do: refused plainly.

- :func:`gradients`: of one or several scalars with respect to tensors of the call (a model's
  intermediate activations: mixed precision's and GPTQ's Hessian estimates), as numpy arrays;
- :func:`variable_gradients`: of a loss with respect to variables, as the backend's tensors, for an
  optimizer's ``apply_gradients`` (GPTQ's training step).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, List, Sequence, Tuple

import keras
import numpy as np

from hwquant.errors import InvalidConfigError


def _refuse(backend: str, what: str) -> InvalidConfigError:
    return InvalidConfigError(f"{what} needs gradients through the Keras model, which hwquant computes on the torch "
                              f"and tensorflow backends, not on '{backend}': set KERAS_BACKEND to one of them")


def gradients(forward: Callable[[List[Any]], Tuple[Any, Sequence[Any]]], inputs: Sequence[np.ndarray],
              what: str) -> List[Any]:
    """``forward(input tensors) -> (scalar, tensors)``: the scalar's gradient with respect to each of
    the tensors, as numpy arrays (None for a tensor the scalar does not depend on). ``what`` names the
    feature in the error raised on a backend without gradients here."""
    def one_loss(xs):
        loss, tensors = forward(xs)
        return [loss], tensors
    return next(gradients_of_each(one_loss, inputs, what))


def gradients_of_each(forward: Callable[[List[Any]], Tuple[Sequence[Any], Sequence[Any]]], inputs: Sequence[np.ndarray],
                      what: str) -> Iterator[List[Any]]:
    """``forward(input tensors) -> (scalars, tensors)``: for each scalar in turn, its gradients with respect
    to the tensors (numpy arrays, None where it does not depend on one), from one forward pass. A
    generator: each scalar's gradients are computed when asked for, so only one set is held at a time."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        with torch.enable_grad():
            xs = [torch.as_tensor(x).to(keras.ops.convert_to_tensor(0.0).device).requires_grad_(x.dtype.kind == "f")
                  for x in inputs]
            losses, tensors = forward(xs)
            for i, loss in enumerate(losses):
                grads = torch.autograd.grad(loss, list(tensors), allow_unused=True, retain_graph=i < len(losses) - 1)
                yield [None if g is None else g.detach().cpu().numpy() for g in grads]
        return
    if backend == "tensorflow":
        import tensorflow as tf

        xs = [tf.convert_to_tensor(x) for x in inputs]
        with tf.GradientTape(persistent=True) as tape:  # (one gradient per loss)
            for x in xs:
                if x.dtype.is_floating:
                    tape.watch(x)
            losses, tensors = forward(xs)
        for loss in losses:
            yield [None if g is None else g.numpy() for g in
                   tape.gradient(loss, list(tensors), unconnected_gradients=tf.UnconnectedGradients.NONE)]
        del tape
        return
    raise _refuse(backend, what)


def variable_gradients(loss_fn: Callable[[], Any], variables: Sequence[Any], what: str) -> Tuple[Any, List[Any]]:
    """(loss, [d loss / d variable]) with ``loss_fn()`` evaluated once; the gradients are the backend's
    tensors (zeros for a variable the loss does not reach)."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        with torch.enable_grad():
            loss = loss_fn()
            grads = torch.autograd.grad(loss, [v.value for v in variables], allow_unused=True)
        return loss.detach(), [torch.zeros_like(v.value) if g is None else g for v, g in zip(variables, grads)]
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = tape.gradient(loss, [v.value for v in variables], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return loss, list(grads)
    raise _refuse(backend, what)
