"""Legacy HDF5 model files (`model.save("model.h5")` of tf.keras 2 / Keras 2) read into Keras 3.

Keras 3 reads such a file with its own legacy-HDF5 loader (`keras.saving.load_model`, needs h5py) when
every layer's config is one its Keras 3 class accepts. tf.keras 2.x writes keys that some Keras 3
classes reject ("Unrecognized keyword arguments passed to ..."):

- SeparableConv1D / SeparableConv2D: `groups`, `kernel_initializer`, `kernel_regularizer`,
  `kernel_constraint` (the layer's kernels are the depthwise and pointwise ones, which have their own);
- DepthwiseConv1D / DepthwiseConv2D and the transposed convolutions: `groups`;
- LSTM / GRU / SimpleRNN: `time_major`;
- SpatialDropout1D / 2D / 3D: `trainable`, `noise_shape`.

`load_legacy_h5_model(path)` removes those keys where their value is the one Keras 3 computes anyway
(`groups` 1, `time_major` false; the others never change the function), inside nested layers too
(Bidirectional, TimeDistributed, nested models), writes the rewritten `model_config` with the file's
weights to a temporary HDF5 copy and loads that with `keras.saving.load_model`: the result is a plain
Keras 3 model of Keras 3's own layers, with the file's layer names (hyphens, dots and all) and weights.
A file that needs no rewrite is loaded as it is. What cannot be rewritten is named in a
LegacyModelError: a `TFOpLambda` layer (a TensorFlow function called on a Keras tensor: rebuild that
part with layers or keras.ops), a grouped transposed convolution, `time_major=True`.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from hwquant.errors import HwquantError

log = logging.getLogger("hwquant.keras")


class LegacyModelError(HwquantError, ValueError):
    """A legacy HDF5 model file hwquant cannot read into Keras 3."""


def _always(value: Any) -> bool:
    return True


def _is_one(value: Any) -> bool:
    return value is None or value == 1


_Rule = Dict[str, Callable[[Any], bool]]  # config key -> whether removing it at this value keeps the function
_SEPARABLE: _Rule = {"groups": _is_one, "kernel_initializer": _always, "kernel_regularizer": _always,
                      "kernel_constraint": _always}
_GROUPS: _Rule = {"groups": _is_one}
_RECURRENT: _Rule = {"time_major": lambda v: not v}
_SPATIAL_DROPOUT: _Rule = {"trainable": _always, "noise_shape": lambda v: v is None}

# class name -> its removable config keys
_REMOVABLE: Dict[str, _Rule] = {
    "SeparableConv1D": _SEPARABLE, "SeparableConv2D": _SEPARABLE,
    "SeparableConvolution1D": _SEPARABLE, "SeparableConvolution2D": _SEPARABLE,
    "DepthwiseConv1D": _GROUPS, "DepthwiseConv2D": _GROUPS,
    "Conv1DTranspose": _GROUPS, "Conv2DTranspose": _GROUPS, "Conv3DTranspose": _GROUPS,
    "Convolution1DTranspose": _GROUPS, "Convolution2DTranspose": _GROUPS, "Convolution3DTranspose": _GROUPS,
    "LSTM": _RECURRENT, "GRU": _RECURRENT, "SimpleRNN": _RECURRENT,
    "SpatialDropout1D": _SPATIAL_DROPOUT, "SpatialDropout2D": _SPATIAL_DROPOUT, "SpatialDropout3D": _SPATIAL_DROPOUT,
}


def rewrite_legacy_config(model_config: Dict[str, Any]) -> List[str]:
    """Rewrite a legacy `model_config` (the HDF5 file's JSON, as a dict) in place for Keras 3; returns
    what was changed, one line per layer. Raises LegacyModelError for what cannot be rewritten."""
    changes: List[str] = []
    problems: List[str] = []
    _rewrite_layer(model_config, changes, problems)
    if problems:
        raise LegacyModelError("the model cannot be read into Keras 3:\n  " + "\n  ".join(problems))
    return changes


def _rewrite_layer(layer: Any, changes: List[str], problems: List[str]) -> None:
    if not isinstance(layer, dict) or "class_name" not in layer:
        return
    cls = layer["class_name"]
    config = layer.get("config")
    if not isinstance(config, dict):
        return
    name = config.get("name", layer.get("name", "?"))
    if cls in ("TFOpLambda", "SlicingOpLambda"):
        problems.append(f"layer {name!r} is a TensorFlow function called on a Keras tensor "
                        f"({config.get('function', '?')}; a {cls} layer, which Keras 3 does not have): "
                        "rebuild that part of the model with Keras layers or keras.ops")
    removed = []
    for key, keeps_function in _REMOVABLE.get(cls, {}).items():
        if key not in config:
            continue
        if keeps_function(config[key]):
            removed.append(f"{key}={config.pop(key)!r}")
        else:
            problems.append(f"layer {name!r} ({cls}) has {key}={config[key]!r}, which Keras 3's {cls} cannot compute")
    if removed:
        changes.append(f"{name} ({cls}): removed {', '.join(removed)}")
    for inner in _inner_layers(config):
        _rewrite_layer(inner, changes, problems)


def _inner_layers(config: Dict[str, Any]) -> List[Any]:
    """The layer records inside a layer's config: of a Bidirectional, TimeDistributed or RNN(cell), and
    of a nested Sequential / functional model."""
    return [config.get(key) for key in ("layer", "backward_layer", "cell")] + list(config.get("layers", ()) or ())


def _decode(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def read_legacy_config(filepath: Any) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """(model_config as a dict, the file's other text attributes: keras_version, backend) of a legacy
    HDF5 model file."""
    import h5py

    with h5py.File(os.fspath(filepath), "r") as f:
        if "model_config" not in f.attrs:
            raise LegacyModelError(
                f"{filepath} holds no model config (a weights-only file, from save_weights?): build the model "
                "in Keras 3 and call model.load_weights on it")
        config = json.loads(_decode(f.attrs["model_config"]))
        attrs = {k: _decode(v) for k, v in f.attrs.items() if k in ("keras_version", "backend")}
    return config, attrs


def load_legacy_h5_model(filepath: Any, custom_objects: Optional[Dict[str, Any]] = None, compile: bool = False,
                         safe_mode: bool = True) -> Any:
    """A legacy HDF5 model file (tf.keras 2 / Keras 2 `model.save("x.h5")`) as a Keras 3 model.

    The configs Keras 3 rejects are rewritten first (see the module's notes; each rewrite logged at INFO);
    `custom_objects`, `compile` (False: the float model is what quantization needs, and legacy training
    configs name optimizers Keras 3 may not have) and `safe_mode` are keras.saving.load_model's: True (the default)
    refuses a file holding a Lambda layer's Python bytecode (UnsafeModelFileError, before Keras is called), False
    runs it (only for files you trust)."""
    import h5py
    import keras

    from hwquant.keras.model_files import KERAS_IN_PYTHON, lambda_layers
    from hwquant.model_files import KERAS_WAYS, names, refusal

    path = os.fspath(filepath)
    config, attrs = read_legacy_config(path)
    found = [repr(n) for n in lambda_layers(config)] if safe_mode else []
    if found:
        raise refusal(path, f"holds Python bytecode that loading it would run (Lambda layer {names(found)})",
                      KERAS_WAYS, KERAS_IN_PYTHON)
    changes = rewrite_legacy_config(config)
    kwargs = {"custom_objects": custom_objects, "compile": compile, "safe_mode": safe_mode}
    if not changes:
        return _load(keras, path, config, kwargs)
    log.info("%s (Keras %s, %s back end): configs rewritten for Keras 3:\n  %s", path,
             attrs.get("keras_version", "?"), attrs.get("backend", "?"), "\n  ".join(changes))
    with tempfile.TemporaryDirectory(prefix="hwquant-legacy-h5-") as tmp:
        copy = os.path.join(tmp, "model.h5")
        with h5py.File(path, "r") as src, h5py.File(copy, "w") as dst:
            dst.attrs.update(src.attrs)
            dst.attrs["model_config"] = json.dumps(config)
            for key in src:
                src.copy(src[key], dst, name=key)
        return _load(keras, copy, config, kwargs)


def _load(keras: Any, path: str, config: Dict[str, Any], kwargs: Dict[str, Any]) -> Any:
    try:
        return keras.saving.load_model(path, **kwargs)
    except KeyError as e:
        # torch.nn.Module.register_parameter: Keras 3 on torch names a weight after its layer
        dotted = sorted(n for n in _layer_names(config) if "." in n)
        if dotted and "can't contain" in str(e.args[0] if e.args else e):
            raise LegacyModelError(
                f"Keras 3 on its torch backend cannot hold the weights of a layer whose name has a dot: {dotted}; "
                "rename those layers, or load the file on Keras' TensorFlow or JAX backend") from e
        raise


def _layer_names(layer: Any) -> List[str]:
    if not isinstance(layer, dict):
        return []
    config: Dict[str, Any] = layer["config"] if isinstance(layer.get("config"), dict) else {}
    names = [config["name"]] if isinstance(config.get("name"), str) else []
    return names + [n for inner in _inner_layers(config) for n in _layer_names(inner)]
