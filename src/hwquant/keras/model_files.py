"""Keras model files read without running code they hold, unless trusted (the rule: hwquant.model_files).

A Keras model file (.keras, or the legacy HDF5 .h5 / .hdf5) is a JSON config plus weights. The code it can
carry is a ``Lambda`` layer's Python function, stored as marshalled bytecode (``{"class_name":
"__lambda__"}``, or tf.keras 2's ``[code, defaults, closure]`` list) that loading turns back into a function
and Keras then calls to build the model. Keras refuses it in its safe mode (``safe_mode=True``, also for
legacy HDF5 files in Keras 3). hwquant reads the config first and refuses such a file by name, before Keras
is called, and loads with ``safe_mode=True``; ``trust=True`` loads with ``safe_mode=False``, which runs it.
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Dict, List, Optional

from hwquant.model_files import KERAS_WAYS, names, refusal

KERAS_IN_PYTHON = "trust=True, or safe_mode=False,"


def read_config(path: Any) -> Optional[Dict[str, Any]]:
    """The model config of a .keras file (its config.json), a Keras model folder or a legacy HDF5 file (its
    model_config attribute); None where there is none to read (Keras then says what the file is)."""
    path = os.fspath(path)
    try:
        if os.path.isdir(path):
            with open(os.path.join(path, "config.json"), "rb") as f:
                return json.loads(f.read())
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return json.loads(archive.read("config.json"))
        if path.endswith((".h5", ".hdf5")):
            import h5py
            with h5py.File(path, "r") as f:
                config = f.attrs.get("model_config")
                if config is None:
                    return None
                return json.loads(config.decode("utf-8") if isinstance(config, bytes) else config)
    except (OSError, KeyError, ValueError, ImportError):
        return None
    return None


def _is_bytecode(value: Any) -> bool:
    """A Python function stored as code: Keras 3's {"class_name": "__lambda__"}, tf.keras 2's [code, ...] list."""
    return (isinstance(value, dict) and value.get("class_name") == "__lambda__") or \
        (isinstance(value, (list, tuple)) and len(value) == 3 and isinstance(value[0], str))


def lambda_layers(config: Any, where: str = "") -> List[str]:
    """The layers of a model config (nested models, wrappers included) that hold Python bytecode: a Lambda layer's
    function, output shape or mask, or a serialized Python lambda anywhere else."""
    found: List[str] = []
    if isinstance(config, dict):
        inner = config.get("config")
        name = inner.get("name") if isinstance(inner, dict) and isinstance(inner.get("name"), str) else where
        if config.get("class_name") == "__lambda__":
            found.append(where or "?")
        elif config.get("class_name") == "Lambda" and isinstance(inner, dict) and (
                any(_is_bytecode(inner.get(key)) for key in ("function", "output_shape", "mask"))
                or inner.get("function_type") == "lambda"):
            found.append(name or "?")
        else:
            for value in config.values():
                found += lambda_layers(value, name)
    elif isinstance(config, list):
        for value in config:
            found += lambda_layers(value, where)
    return list(dict.fromkeys(found))


def check_keras_file(path: Any) -> None:
    """Refuse (hwquant.errors.UnsafeModelFileError) a Keras model file that holds Python bytecode (a Lambda layer's function)."""
    found = [repr(n) for n in lambda_layers(read_config(path))]
    if found:
        raise refusal(path, f"holds Python bytecode that loading it would run (Lambda layer {names(found)})",
                      KERAS_WAYS, KERAS_IN_PYTHON)


def load_keras_model(path: Any, trust: bool = False, custom_objects: Optional[Dict[str, Any]] = None,
                     compile: bool = False) -> Any:
    """keras.saving.load_model of a model file: untrusted (the default), checked first (check_keras_file) and
    loaded in Keras' safe mode (UnsafeModelFileError where Keras refuses a lambda the check did not see);
    `trust=True`: Keras' unsafe mode, which runs the file's Python bytecode."""
    import keras

    if trust:
        return keras.saving.load_model(path, custom_objects=custom_objects, compile=compile, safe_mode=False)
    check_keras_file(path)
    try:
        return keras.saving.load_model(path, custom_objects=custom_objects, compile=compile, safe_mode=True)
    except ValueError as e:
        if "safe_mode" in str(e):  # Keras' own refusal of a Python lambda
            raise refusal(path, "holds Python bytecode that loading it would run (a Python lambda Keras refuses "
                                "in its safe mode)", KERAS_WAYS, KERAS_IN_PYTHON) from None
        raise

