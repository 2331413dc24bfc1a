"""The command line's Keras adapter (contract: hwquant.cli.frameworks.CommandLineAdapter): read a model
file, run a model on numpy batches, export and read back the files the suffix of --out asks for."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np

NAME = "keras"
CHANNELS_LAST = True
EXPORTS: Dict[str, str] = {".keras": "the quantized Keras model (reload: mct.keras_load_quantized_model)",
                           ".tflite": "a fully integer TFLite file (Keras' TensorFlow backend)",
                           ".onnx": "ONNX written by Keras' exporter (QuantizeLinear / DequantizeLinear)"}


def is_model(obj: Any) -> bool:
    return isinstance(obj, keras.Model)


def load_model(path: str, trust: bool = False) -> Any:
    """A .keras / .h5 model file; a Lambda layer's Python bytecode is refused unless `trust` (hwquant.keras.
    model_files: Keras' safe mode, checked first)."""
    from hwquant.keras.model_files import load_keras_model
    return load_keras_model(path, trust=trust)


def prepare_model(model: Any, sample: Sequence[np.ndarray]) -> Tuple[Any, Optional[str]]:
    """The model as read: a Keras model needs no conversion."""
    return model, None


def load_quantized(path: str, trust: bool = False) -> Any:
    from hwquant.keras.facade import keras_load_quantized_model
    return keras_load_quantized_model(path, compile=False, safe_mode=not trust)


def _outputs(out: Any) -> List[np.ndarray]:
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in _outputs(o)]
    return [np.asarray(keras.ops.convert_to_numpy(out), dtype=np.float32)]


def predict(model: Any, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    return _outputs(model(list(inputs) if len(inputs) > 1 else inputs[0], training=False))


def export(model: Any, path: str, representative_dataset: Callable[[], Any], fmt: str) -> Path:
    """Write `model` (quantized by hwquant) to `path` in the format its suffix names (EXPORTS)."""
    from hwquant.exporter import KerasExportSerializationFormat as S
    from hwquant.exporter import QuantizationFormat as Q
    from hwquant.keras.export import keras_export_model

    suffix = Path(path).suffix
    serialization = {".keras": S.KERAS, ".tflite": S.TFLITE, ".onnx": S.ONNX}[suffix]
    quantization = {".keras": Q.MCTQ, ".tflite": Q.INT8, ".onnx": Q.FAKELY_QUANT}[suffix]
    return keras_export_model(model, path, serialization_format=serialization, quantization_format=quantization)


def run_exported(path: str, inputs: Sequence[np.ndarray], trust: bool = False) -> List[np.ndarray]:
    """The outputs of an exported file run as deployed: TFLite in the LiteRT interpreter (its batch resized
    to the inputs'), ONNX in ONNX Runtime, a .keras file reloaded (in Keras' safe mode unless `trust`)."""
    if path.endswith(".tflite"):
        from hwquant.keras.tflite_int8 import _interpreter
        interpreter = _interpreter(Path(path).read_bytes())
        details = interpreter.get_input_details()
        for detail, value in zip(details, inputs):
            interpreter.resize_tensor_input(detail["index"], value.shape)
        interpreter.allocate_tensors()
        for detail, value in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], value.astype(detail["dtype"]))
        interpreter.invoke()
        return [np.asarray(interpreter.get_tensor(d["index"]), dtype=np.float32)
                for d in interpreter.get_output_details()]
    if path.endswith(".onnx"):
        from hwquant.exporter.onnx_runtime import run_onnx
        return run_onnx(path, inputs)
    return predict(load_quantized(path, trust=trust), inputs)


def quantized_layers(model: Any) -> List[str]:
    """The names of the layers whose weights the quantized model quantizes."""
    from hwquant.keras.quantizers import KerasQuantizationWrapper
    return [layer.name for layer in model.layers if isinstance(layer, KerasQuantizationWrapper)]


def export_problem(suffix: str) -> Optional[str]:
    """Why this process cannot write a `suffix` file (said before any long work), or None."""
    if suffix == ".tflite" and keras.backend.backend() != "tensorflow":
        return (f"a .tflite file needs Keras' TensorFlow backend (this process runs '{keras.backend.backend()}'): "
                "run with KERAS_BACKEND=tensorflow")
    return None


def fixed_batch_size(model: Any) -> Optional[int]:
    """The batch size the model's inputs were declared with (keras.Input(batch_size=...)), None where it is free."""
    sizes = {tuple(t.shape)[0] for t in model.inputs if len(t.shape)}
    size = sizes.pop() if len(sizes) == 1 else None
    return size if isinstance(size, int) else None
