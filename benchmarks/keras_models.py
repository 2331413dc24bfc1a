"""Keras 3 versions of the benchmark models, with the real weights of their PyTorch versions.

MobileNetV2: keras.applications.MobileNetV2's architecture with torchvision's ImageNet weights. Two
facts make the Keras graph compute a different function out of the box, and the model's config is
edited so that it computes torchvision's:
- stride-2 convolutions: Keras pads bottom / right only ('same' padding on the stem convolution,
  ZeroPadding2D(correct_pad) before each stride-2 depthwise convolution); torchvision pads one pixel
  on every side. The stem gets a ZeroPadding2D((1, 1)) and 'valid' padding, the block pads become (1, 1).
- batch-norm epsilon: Keras 1e-3, torchvision 1e-5 (thousands of channels have a running variance
  below 1e-3): every BatchNormalization gets 1e-5.
Weights map in order (conv, bn, ..., classifier): OIHW -> HWIO, depthwise (C, 1, kh, kw) -> (kh, kw, C, 1),
Linear (out, in) -> Dense (in, out). Inputs are NHWC.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np


def _keras():
    import keras
    return keras


def torchvision_mobilenet_v2_config(keras: Any, point_inbound_to: Callable[[Dict[str, Any], str], None]) -> Dict[str, Any]:
    """The config of `keras.applications.MobileNetV2` (no weights; Keras 3, or Keras 2 for MCT's Keras
    peer) edited for torchvision's padding and batch-norm epsilon. `point_inbound_to(layer, source)`
    rewires a layer's input in that Keras version's config format."""
    base = keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3), classes=1000,
                                          classifier_activation=None)
    config = copy.deepcopy(base.get_config())
    layers: List[Dict[str, Any]] = config["layers"]
    for layer in layers:
        if layer["class_name"] == "BatchNormalization":
            layer["config"]["epsilon"] = 1e-5
        if layer["class_name"] == "ZeroPadding2D":
            layer["config"]["padding"] = ((1, 1), (1, 1))
    stem = next(i for i, layer in enumerate(layers) if layer["name"] == "Conv1")
    stem_layer = layers[stem]
    stem_layer["config"]["padding"] = "valid"
    pad = {"module": "keras.layers", "class_name": "ZeroPadding2D", "name": "Conv1_pad",
           "config": {"name": "Conv1_pad", "trainable": True, "dtype": stem_layer["config"]["dtype"],
                      "padding": ((1, 1), (1, 1)), "data_format": "channels_last"},
           "registered_name": None, "build_config": {"input_shape": [None, 224, 224, 3]},
           "inbound_nodes": copy.deepcopy(stem_layer["inbound_nodes"])}
    layers.insert(stem, pad)
    point_inbound_to(stem_layer, "Conv1_pad")
    return config


def keras_mobilenet_v2_architecture() -> Any:
    """keras.applications.MobileNetV2 (no weights) with torchvision's padding and batch-norm epsilon."""
    keras = _keras()
    return keras.Model.from_config(torchvision_mobilenet_v2_config(keras, _point_inbound_to))


def _point_inbound_to(layer: Dict[str, Any], source: str) -> None:
    """Make the layer's single inbound tensor come from `source` (Keras 3 functional config format)."""
    node = layer["inbound_nodes"][0]
    history = node["args"][0]["config"]["keras_history"]
    history[0], history[1], history[2] = source, 0, 0


def _copy_conv_bn_weights(model: Any, state_dict: Dict[str, Any]) -> None:
    """Torch convolution / batch-norm weights into the Keras model's convolution / batch-norm layers, in
    order (both are built in the same layer order)."""
    convs = [k[:-len(".weight")] for k, v in state_dict.items() if k.endswith(".weight") and np.ndim(v) == 4]
    bns = [k[:-len(".running_mean")] for k in state_dict if k.endswith(".running_mean")]
    keys = list(state_dict)
    torch_layers = sorted(convs + bns, key=lambda k: keys.index(k + ".weight"))
    keras_layers = [layer for layer in model.layers if layer.weights and layer.__class__.__name__ != "Dense"]
    if len(torch_layers) != len(keras_layers):
        raise ValueError(f"{len(torch_layers)} torch conv/bn layers against {len(keras_layers)} Keras ones")
    for name, layer in zip(torch_layers, keras_layers):
        if name in bns:
            layer.set_weights([_np(state_dict[name + s]) for s in (".weight", ".bias", ".running_mean", ".running_var")])
        elif layer.__class__.__name__ == "DepthwiseConv2D":
            layer.set_weights([_np(state_dict[name + ".weight"]).transpose(2, 3, 0, 1)])
        else:
            layer.set_weights([_np(state_dict[name + ".weight"]).transpose(2, 3, 1, 0)])


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.detach().cpu().numpy() if hasattr(t, "detach") else t, np.float32)


def keras_mobilenet_v2_from_torch(state_dict: Dict[str, Any]) -> Any:
    """The Keras MobileNetV2 computing torchvision's function with its weights (`state_dict`: torchvision's)."""
    model = keras_mobilenet_v2_architecture()
    _copy_conv_bn_weights(model, state_dict)
    model.get_layer("predictions").set_weights([_np(state_dict["classifier.1.weight"]).T,
                                                _np(state_dict["classifier.1.bias"])])
    return model


def _conv_bn(x: Any, filters: int, kernel: int = 3, stride: int = 1, relu6: bool = True, depthwise: bool = False) -> Any:
    """torchvision-style conv (padding (k - 1) / 2 on every side) + batch norm (eps 1e-5) [+ ReLU6]."""
    L = _keras().layers
    pad = (kernel - 1) // 2
    if stride > 1 and pad:  # Keras 'same' would pad bottom / right only
        x = L.ZeroPadding2D(pad)(x)
    padding = "valid" if stride > 1 or not pad else "same"
    conv = (L.DepthwiseConv2D(kernel, stride, padding=padding, use_bias=False) if depthwise
            else L.Conv2D(filters, kernel, stride, padding=padding, use_bias=False))
    x = L.BatchNormalization(epsilon=1e-5)(conv(x))
    return L.ReLU(6.0)(x) if relu6 else x


def keras_fashion_model(name: str, state_dict: Dict[str, Any]) -> Any:
    """The Keras version of a Fashion-MNIST CNN of benchmarks.models (NHWC input, 28 x 28 x 1), with the
    trained PyTorch weights."""
    keras = _keras()
    L = keras.layers
    x = inp = keras.Input((28, 28, 1))
    if name == "plain_cnn":
        for filters in (16, 32, 64):
            x = L.ReLU()(L.BatchNormalization(epsilon=1e-5)(L.Conv2D(filters, 3, padding="same", use_bias=False)(x)))
            if filters != 64:
                x = L.MaxPooling2D(2)(x)
        x = L.Flatten()(x)
        model = keras.Model(inp, L.Dense(10)(x), name=name)
        _copy_conv_bn_weights(model, state_dict)
        w = _np(state_dict["classifier.weight"])  # (10, C * H * W) flattened channels-first
        w = w.reshape(10, 64, 7, 7).transpose(2, 3, 1, 0).reshape(7 * 7 * 64, 10)  # rows in NHWC order
        model.layers[-1].set_weights([w, _np(state_dict["classifier.bias"])])
        return model
    if name != "mobile_cnn":
        raise KeyError(f"unknown Fashion-MNIST model {name!r}")
    x = _conv_bn(x, 16)
    for cin, cout, stride, expand in ((16, 16, 1, 1), (16, 24, 2, 4), (24, 24, 1, 4), (24, 32, 2, 4), (32, 32, 1, 4)):
        y = x if expand == 1 else _conv_bn(x, cin * expand, kernel=1)
        y = _conv_bn(y, 0, stride=stride, depthwise=True)
        y = _conv_bn(y, cout, kernel=1, relu6=False)
        x = L.Add()([x, y]) if stride == 1 and cin == cout else y
    x = L.GlobalAveragePooling2D()(_conv_bn(x, 128, kernel=1))
    model = keras.Model(inp, L.Dense(10)(x), name=name)
    _copy_conv_bn_weights(model, state_dict)
    model.layers[-1].set_weights([_np(state_dict["classifier.weight"]).T, _np(state_dict["classifier.bias"])])
    return model


def w4a4_core_config(mct: Any, layers: Any, model: Any) -> Any:
    """A CoreConfig putting every kernel and activation at 4 bits but the input image's and the logits'
    (8 bits), by edit rules of MCT's network editor API: `mct` is hwquant or MCT, `layers` that side's
    Keras layers module (the same rules for both tools)."""
    ne = mct.core.network_editor
    depthwise = layers.DepthwiseConv2D(3)
    depthwise.build((None, 5, 5, 2))  # its kernel's name: 'kernel' in Keras 3, 'depthwise_kernel' in Keras 2
    kernels = ((layers.Conv2D, "kernel"), (layers.DepthwiseConv2D, depthwise.weights[0].name.split("/")[-1].split(":")[0]),
               (layers.Dense, "kernel"))
    rules = [ne.EditRule(filter=ne.NodeTypeFilter(t),
                         action=ne.ChangeFinalWeightsQuantConfigAttr(attr_name=attr, weights_n_bits=4)) for t, attr in kernels]
    rules += [ne.EditRule(filter=ne.NodeTypeFilter(t), action=ne.ChangeFinalActivationQuantConfigAttr(activation_n_bits=4))
              for t in {type(layer) for layer in model.layers}]
    rules += [ne.EditRule(filter=ne.NodeNameFilter(name), action=ne.ChangeFinalActivationQuantConfigAttr(activation_n_bits=8))
              for name in (model.layers[0].name, model.layers[-1].name)]
    return mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=rules))


# ---- runs in other venvs (TensorFlow): weights travel by layer name in an .npz -----------------------
def weights_by_name(model: Any) -> Dict[str, np.ndarray]:
    """Every layer's weights as `w:<layer>:<k>` arrays (read back by set_weights_by_name)."""
    return {f"w:{layer.name}:{k}": w for layer in model.layers for k, w in enumerate(layer.get_weights())}


def set_weights_by_name(model: Any, arrays: Any) -> None:
    for layer in model.layers:
        keys = sorted((k for k in arrays.files if k.startswith(f"w:{layer.name}:")), key=lambda k: int(k.rsplit(":", 1)[1]))
        if keys:
            layer.set_weights([arrays[k] for k in keys])


REPEATS = 3  # quantization calls timed in one process: the median, and the first (one-time set-up included)


def timed_calls(call: Callable[[], Any], repeats: int = REPEATS) -> tuple:
    """(the first call's result, median seconds, first call's seconds) of `repeats` calls."""
    times, result = [], None
    for k in range(repeats):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
        result = out if k == 0 else result
    return result, float(np.median(times)), times[0]


def quantize_and_save(model: Any, quantize: Callable[[Any, Callable[[], Any]], Any], arrays: Any, out: str) -> Any:
    """Time `quantize(model, representative_data_gen)` on the calibration images of `arrays` (batches of
    32; timed_calls) and save the float and quantized logits on its evaluation images, and the seconds,
    to `out`; returns the quantized model."""
    calib, evaluation = arrays["calib"], arrays["eval"]
    quantized, seconds, first = timed_calls(
        lambda: quantize(model, lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32))))
    predict = lambda m: np.concatenate([m.predict_on_batch(evaluation[i:i + 64])  # noqa: E731
                                        for i in range(0, len(evaluation), 64)])
    np.savez(out, float_logits=predict(model), quantized_logits=predict(quantized), seconds=seconds, first=first)
    return quantized


def float_tflite(keras: Any, model: Any, path: str) -> None:
    """The float model as a TFLite file at batch 1 (the fixed batch the INT8 files have), on the
    TensorFlow backend of `keras` (Keras 3 or tf.keras)."""
    import tensorflow as tf

    fixed = keras.models.clone_model(model, input_tensors=keras.Input(batch_shape=(1,) + tuple(model.inputs[0].shape[1:])))
    fixed.set_weights(model.get_weights())
    Path(path).write_bytes(tf.lite.TFLiteConverter.from_keras_model(fixed).convert())


def mixed_precision_and_save(model: Any, ru_data: Callable[[Any, Callable[[], Any]], Any],
                             quantize: Callable[[Any, Callable[[], Any], float], Any], arrays: Any, out: str,
                             ratio: float) -> None:
    """Time mixed precision at `ratio` of the weights memory `ru_data(model, gen)` gives, on the same
    data as quantize_and_save; save its logits and seconds to `out` (a tool's own ResourceUtilization)."""
    calib, evaluation = arrays["calib"], arrays["eval"]
    gen = lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32))  # noqa: E731
    start = time.perf_counter()
    quantized = quantize(model, gen, ratio * ru_data(model, gen).weights_memory)
    seconds = time.perf_counter() - start
    logits = np.concatenate([quantized.predict_on_batch(evaluation[i:i + 64]) for i in range(0, len(evaluation), 64)])
    np.savez(out, quantized_logits=logits, seconds=seconds)
