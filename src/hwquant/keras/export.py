"""`mct.exporter.keras_export_model`: write a quantized Keras model (MCT's signature).

    KERAS + MCTQ          the quantized model as it is (.keras): wrappers and holders, which
                          `mct.keras_load_quantized_model` reads on any backend
    KERAS + FAKELY_QUANT  every KerasQuantizationWrapper replaced by its inner layer (plain Keras
                          layers holding the quantized weights); the activation holders stay
    TFLITE + FAKELY_QUANT the model converted by TensorFlow's converter (Keras' TensorFlow backend):
                          float operations computing the fake quantization
    TFLITE + INT8         a fully integer graph with hwquant's scales (tflite_int8.py); its batch is free
                          (`interpreter.resize_tensor_input` runs any batch), or fixed with `batch_size=n`
    ONNX + FAKELY_QUANT   Keras' own ONNX export (torch.onnx on the torch backend, tf2onnx on TensorFlow):
                          the quantizers as the float operations they compute (Div, Round, Clip, Mul)
A model without hwquant's quantization layers (a float model, e.g. pruned and fine-tuned) is written as the
float model, as MCT does, in every format but TFLITE + INT8 (which needs a quantized model), with a warning.
Files are written whole or not at all.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Optional

import keras

from hwquant.concurrency import KERAS_LOCK
from hwquant.errors import ExportError
from hwquant.exporter.formats import KerasExportSerializationFormat as KSF
from hwquant.exporter.formats import QuantizationFormat as QF
from hwquant.exporter.formats import as_format
from hwquant.fileio import atomic_write, write_through_temporary
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper

SUPPORTED = {KSF.KERAS: (QF.MCTQ, QF.FAKELY_QUANT), KSF.TFLITE: (QF.FAKELY_QUANT, QF.INT8), KSF.ONNX: (QF.FAKELY_QUANT,)}
SUFFIX = {KSF.KERAS: ".keras", KSF.TFLITE: ".tflite", KSF.ONNX: ".onnx"}
log = logging.getLogger("hwquant.exporter")


def is_keras_layer_exportable(layer: Any) -> bool:
    """MCT's check of one layer: a wrapper holds a non-empty dict of weight quantizers, a holder its quantizer."""
    if isinstance(layer, KerasQuantizationWrapper):
        return isinstance(layer.weights_quantizers, dict) and len(layer.weights_quantizers) > 0
    if isinstance(layer, KerasActivationQuantizationHolder):
        return layer.activation_holder_quantizer is not None
    return isinstance(layer, keras.layers.Layer)


def _without_wrappers(model: Any) -> Any:
    def inner(layer):
        return layer.layer if isinstance(layer, KerasQuantizationWrapper) else layer
    flat = keras.models.clone_model(model, clone_function=lambda layer: inner(layer).__class__.from_config(
        inner(layer).get_config()))
    for src, dst in zip(model.layers, flat.layers):
        dst.set_weights(inner(src).get_weights())
    return flat


def _export_onnx(model: Any, tmp: str) -> None:
    specs = [keras.InputSpec(shape=t.shape, dtype=t.dtype) for t in model.inputs]
    try:
        model.export(tmp, format="onnx", verbose=False, input_signature=specs if len(specs) == 1 else [specs])
    except ImportError as e:
        raise ExportError(f"Keras' ONNX export on the {keras.backend.backend()} backend needs a package that is not "
                          f"installed ({e}): pip install tf2onnx on TensorFlow, onnx on torch") from e


def keras_export_model(model: Any, save_model_path: Any, is_layer_exportable_fn: Optional[Callable[[Any], bool]] = None,
                       serialization_format: Any = KSF.KERAS, quantization_format: Any = QF.MCTQ, *,
                       batch_size: Optional[int] = None) -> Path:
    """Export a Keras model quantized by hwquant; returns the path written (see the module docstring).
    ``batch_size`` (TFLITE + INT8 only, keyword): None leaves the file's batch free (resizable), n fixes it.
    Keras calls take turns (concurrency.KERAS_LOCK)."""
    with KERAS_LOCK:
        return _export(model, save_model_path, is_layer_exportable_fn, serialization_format, quantization_format,
                       batch_size)


def _export(model: Any, save_model_path: Any, is_layer_exportable_fn: Optional[Callable[[Any], bool]],
            serialization_format: Any, quantization_format: Any, batch_size: Optional[int] = None) -> Path:
    serialization = as_format(serialization_format, KSF, "serialization_format")
    quantization = as_format(quantization_format, QF, "quantization_format")
    if batch_size is not None and (serialization, quantization) != (KSF.TFLITE, QF.INT8):
        raise ExportError(f"batch_size applies to the TFLITE INT8 file only, not to {serialization.name} "
                          f"{quantization.name}; leave it None")
    if quantization not in SUPPORTED[serialization]:
        raise ExportError(f"{serialization.name} export does not support quantization_format={quantization.name}; "
                          f"use {' or '.join(q.name for q in SUPPORTED[serialization])}"
                          + (" (or serialization_format=TFLITE for a fully integer file)" if quantization == QF.INT8 else ""))
    if not isinstance(model, keras.Model):
        raise ExportError(f"model must be a keras.Model quantized by hwquant, got {type(model).__name__}")
    is_float = not any(isinstance(layer, (KerasQuantizationWrapper, KerasActivationQuantizationHolder))
                       for layer in model.layers)
    if is_float and quantization == QF.INT8:
        raise ExportError(f"the model '{model.name}' holds no hwquant quantization layers (it is not quantized): an "
                          "INT8 TFLite file needs a quantized model; quantize it first with "
                          "mct.ptq.keras_post_training_quantization, or export it as a float file with "
                          "quantization_format=FAKELY_QUANT")
    refused = [layer.name for layer in model.layers if (is_layer_exportable_fn or is_keras_layer_exportable)(layer) is False]
    if refused:
        raise ExportError(f"is_layer_exportable_fn refused the layers {refused[:8]}; nothing was written")
    if not isinstance(save_model_path, (str, os.PathLike)) or not str(save_model_path):
        raise ExportError(f"save_model_path must be a file path, got {save_model_path!r}")
    path, suffix = Path(save_model_path), SUFFIX[serialization]
    if not path.parent.is_dir():
        raise ExportError(f"cannot write '{path}': folder '{path.parent}' does not exist; create it first")
    if path.suffix != suffix:
        raise ExportError(f"{serialization.name} export writes '{suffix}' files: give save_model_path a '{suffix}' name, "
                          f"not '{path.name}'")
    written = _write(model, path, serialization, quantization, batch_size, is_float)
    if is_float:
        log.warning("the model '%s' holds no hwquant quantization layers: it is not quantized, and the %s file "
                    "written to %s is float (quantize it first with mct.ptq.keras_post_training_quantization for a "
                    "quantized file)", model.name, serialization.name, path)
    return written


def _write(model: Any, path: Path, serialization: Any, quantization: Any, batch_size: Optional[int],
           is_float: bool) -> Path:
    if serialization == KSF.KERAS:
        as_is = quantization == QF.MCTQ or is_float  # (a float model has no wrappers to take off)
        write_through_temporary(path, (model if as_is else _without_wrappers(model)).save)
        return path
    if serialization == KSF.ONNX:
        write_through_temporary(path, lambda tmp: _export_onnx(model, tmp))
        return path
    if keras.backend.backend() != "tensorflow":
        raise ExportError(f"TFLite export needs Keras' TensorFlow backend (this process runs '{keras.backend.backend()}'): "
                          "set KERAS_BACKEND=tensorflow before importing keras, load the model with "
                          "mct.keras_load_quantized_model, and export it there")
    if quantization == QF.INT8:
        from hwquant.keras.tflite_int8 import int8_tflite

        atomic_write(path, int8_tflite(model, batch_size))
        return path
    import tensorflow as tf

    try:
        data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    except Exception as e:  # noqa: BLE001 - the converter's own errors, said plainly
        raise ExportError(f"TensorFlow's converter refused the model: {type(e).__name__}: {str(e).splitlines()[0]}") from e
    atomic_write(path, data)
    return path
