"""A Keras model's outputs on numpy batches, as numpy: ``predict_on_batch`` without its retracing on TensorFlow.

On the TensorFlow backend ``predict_on_batch`` runs a ``tf.function`` traced for each batch shape it meets (the
last, smaller batch of a data set traces the whole model again), and TensorFlow counts the tracings of every
model's predict function together (they share one Python function): after a few models built in a row (the
statistics model, each candidate a pass compares) it warns of excessive retracing on every run. Here each model
gets one function of its own, traced once for any batch size (its inputs' batch dimension left free), and
reused for every batch. On the other backends ``predict_on_batch`` itself runs (no tracing there)."""
from __future__ import annotations

import functools
import weakref
from typing import Any, Optional

import keras
import numpy as np

_COMPILED: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _call(model_ref: Any, as_list: bool, *inputs: Any) -> Any:
    return model_ref()(list(inputs) if as_list else inputs[0], training=False)


def _compiled(model: Any) -> Optional[Any]:
    """The model's inference function with a free batch dimension (made once per model), or None where the
    model declares no inputs to make it from."""
    import tensorflow as tf

    if model in _COMPILED:
        return _COMPILED[model]
    try:
        inputs = list(model.inputs)
    except (AttributeError, ValueError):  # a subclassed model never called on symbolic inputs
        inputs = []
    struct = getattr(model, "_inputs_struct", None)
    if not inputs or isinstance(struct, dict):  # (inputs by name: predict_on_batch matches them)
        return None
    as_list = isinstance(struct, (list, tuple)) or len(inputs) > 1  # as the model was built: Keras warns otherwise
    signature = [tf.TensorSpec((None,) + tuple(t.shape[1:]), t.dtype) for t in inputs]
    # (a partial, not a function: TensorFlow counts tracings per Python function, so one function shared by
    # every model would be counted as retraced each time a new model is traced)
    function = tf.function(functools.partial(_call, weakref.ref(model), as_list), input_signature=signature,
                           jit_compile=bool(getattr(model, "jit_compile", False)), reduce_retracing=True)
    _COMPILED[model] = function
    return function


def predict_on_batch(model: Any, x: Any) -> Any:
    """``model.predict_on_batch(x)``: the outputs (numpy, in the model's output structure) of one batch ``x`` (an
    array, or a list of arrays in the order of the model's inputs)."""
    if keras.backend.backend() != "tensorflow":
        return model.predict_on_batch(x)
    arrays = list(x) if isinstance(x, (list, tuple)) else [x]
    function = _compiled(model) if all(isinstance(a, np.ndarray) for a in arrays) else None
    if function is None or len(arrays) != len(function.input_signature) or not all(
            spec.shape.is_compatible_with(a.shape) for a, spec in zip(arrays, function.input_signature)):
        return model.predict_on_batch(x)  # (its own checks and messages)
    fed = [np.asarray(a, dtype=spec.dtype.as_numpy_dtype) for a, spec in zip(arrays, function.input_signature)]
    return keras.tree.map_structure(lambda t: t.numpy(), function(*fed))
