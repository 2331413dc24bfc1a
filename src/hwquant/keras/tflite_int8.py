"""TFLite INT8: a fully integer TFLite graph from a quantized Keras model (Keras' TensorFlow backend).

TensorFlow's converter turns a fake-quant op into the quantization parameters of the tensor it
produces (its quantization-aware path). So the model is rebuilt with each hwquant quantizer written
as that op on exactly hwquant's grid:

- an activation holder -> FakeQuantWithMinMaxVars over the 8-bit grid's [smallest, largest] value
  (the converter reads back the same scale and zero point);
- a wrapped layer -> its quantized kernel as a constant behind FakeQuantWithMinMaxVarsPerChannel over
  the signed 8-bit range of the kernel's scales (zero point 0; a grid of fewer bits is a subset, so
  its values are stored exactly), then the layer's own operation in TensorFlow;
- a per-channel Dense -> a 1x1 convolution between two static reshapes (TFLite's FULLY_CONNECTED
  takes a per-tensor kernel only: the converter refuses per-channel scales there).

The batch: by default the file's batch dimension is left free (shape signature -1, size 1 until
resized): `interpreter.resize_tensor_input(index, (n, ...))` then runs any batch, as MCT's files do. The
reshapes of the rebuilt model name their batch as -1 (a Dense's, and Flatten / Reshape layers', which
Keras would otherwise compute from a SHAPE operation), so the graph holds no shape operations and the
XNNPACK delegate still takes it whole. `batch_size=n` fixes the batch at n instead (the file's input is
then (n, ...) and stays so). The file is then checked: every operation between the input QUANTIZE and the
output DEQUANTIZE computes on integers, otherwise the export fails and says which operations stayed float.
"""
from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any, Dict, List, Optional

import keras
import numpy as np

from hwquant.core.numerics import quant_math
from hwquant.errors import ExportError
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasInferableQuantizer, KerasQuantizationWrapper

KERNEL_LAYERS = (keras.layers.DepthwiseConv2D, keras.layers.Conv2D, keras.layers.Dense)  # depthwise first: a subclass


def _affine_grid(quantizer: KerasInferableQuantizer, where: str) -> quant_math.AffineGrid:
    if not isinstance(quantizer.grid, quant_math.AffineGrid):
        raise ExportError(f"{where}: a lookup-table quantizer has no TFLite INT8 form; export FAKELY_QUANT, or quantize "
                          "with a TPC whose weights use power-of-two or symmetric quantization")
    return quantizer.grid


def activation_range(holder: Any) -> tuple:
    """(min, max) of the holder's 8-bit grid, as FakeQuantWithMinMaxVars takes them."""
    quantizer = holder.activation_holder_quantizer
    grid = _affine_grid(quantizer, f"activation holder '{holder.name}'")
    if quantizer.num_bits != 8:
        raise ExportError(f"activation holder '{holder.name}' quantizes to {quantizer.num_bits} bits; TFLite INT8 carries "
                          "8-bit activations only: export FAKELY_QUANT, or quantize activations at 8 bits")
    low, high = quant_math.grid_range(grid)
    return float(low), float(high)


def kernel_range(wrapper: Any) -> tuple:
    """Per output channel (min, max) of the signed 8-bit range at the kernel's scales (zero point 0)."""
    quantizer = wrapper.weights_quantizers.get("kernel")
    if quantizer is None:
        raise ExportError(f"layer '{wrapper.name}': only a quantized kernel has a TFLite INT8 form, got "
                          f"{sorted(wrapper.weights_quantizers)}; export FAKELY_QUANT")
    grid = _affine_grid(quantizer, f"layer '{wrapper.name}'")
    if quantizer.num_bits > 8 or np.any(np.asarray(grid.zero_point) != 0):
        raise ExportError(f"layer '{wrapper.name}': TFLite INT8 kernels are signed 8-bit with zero point 0; this kernel is "
                          f"{quantizer.num_bits}-bit {quantizer.method.name}: export FAKELY_QUANT, or quantize weights "
                          "with power-of-two or symmetric quantization at 8 bits or fewer")
    scale = np.asarray(grid.scale, np.float64).reshape(-1)
    n_out = int(np.asarray(wrapper.layer.kernel.shape)[-1])
    scale = np.broadcast_to(scale, (n_out,)) if scale.size in (1, n_out) else scale
    return (-128 * scale).astype(np.float32), (127 * scale).astype(np.float32)


# TFLite's integer ADD / CONCATENATION / MUL rescale their inputs and round ties upward, where the
# simulation rounds them to even. With power-of-two scales ties are frequent (an input grid twice as
# fine as the output's makes half the values ties) and rounding them all upward biases every residual
# sum; on MobileNetV2 that alone took the file from 82 % to 50 % top-1 agreement with the float model.
# Widening the output range of such an operation by this factor makes TFLite round its ties toward
# zero instead (symmetric, no bias), and moves other values by at most 255 * 2**-14 = 0.016 step.
TIE_BREAK = 2.0 ** -14


class _FakeQuantActivation(keras.layers.Layer):
    def __init__(self, holder: Any, tie_break: bool = False):
        super().__init__(name=holder.name)
        self.low, self.high = (v * (1 + TIE_BREAK * tie_break) for v in activation_range(holder))

    def call(self, x):
        import tensorflow as tf

        return tf.quantization.fake_quant_with_min_max_vars(x, self.low, self.high, num_bits=8, narrow_range=False)


class _IntegerKernelLayer(keras.layers.Layer):
    """A wrapped Conv2D / DepthwiseConv2D / Dense computed in TensorFlow from its quantized kernel
    behind a per-channel fake-quant op (bias, the layer's own activation after it)."""

    def __init__(self, wrapper: Any):
        super().__init__(name=wrapper.name)
        inner = wrapper.layer
        if not isinstance(inner, KERNEL_LAYERS) or getattr(inner, "groups", 1) != 1:
            raise ExportError(f"layer '{wrapper.name}' ({type(inner).__name__}) has no TFLite INT8 form here: Conv2D "
                              "(groups=1), DepthwiseConv2D and Dense do; export FAKELY_QUANT")
        self.inner = inner
        self.low, self.high = kernel_range(wrapper)
        self.kernel = np.asarray(keras.ops.convert_to_numpy(inner.kernel), np.float32)
        self.bias = np.asarray(keras.ops.convert_to_numpy(inner.bias), np.float32) if inner.use_bias else None

    def _quantized(self, kernel: Any) -> Any:
        """The kernel (output channels last) behind the fake-quant op the converter reads."""
        import tensorflow as tf

        return tf.quantization.fake_quant_with_min_max_vars_per_channel(
            tf.constant(kernel), self.low, self.high, num_bits=8, narrow_range=False)

    def call(self, x):
        import tensorflow as tf

        inner = self.inner
        if isinstance(inner, keras.layers.Dense):
            shape = tuple(x.shape)[1:]  # every dimension but the batch is known; the batch: -1 (no SHAPE operation)
            rows = int(np.prod(shape[:-1], dtype=np.int64))
            kernel = self._quantized(self.kernel.reshape((1, 1) + self.kernel.shape))
            y = tf.nn.conv2d(tf.reshape(x, (-1, 1, rows, shape[-1])), kernel, 1, "VALID")
        else:
            strides = (1,) + tuple(inner.strides) + (1,)
            padding = inner.padding.upper()
            if isinstance(inner, keras.layers.DepthwiseConv2D):
                kh, kw, cin, mult = self.kernel.shape  # per-channel over cin * mult, TFLite's depthwise channels
                kernel = tf.reshape(self._quantized(self.kernel.reshape(kh, kw, 1, cin * mult)), (kh, kw, cin, mult))
                y = tf.nn.depthwise_conv2d(x, kernel, strides, padding, dilations=inner.dilation_rate)
            else:
                y = tf.nn.conv2d(x, self._quantized(self.kernel), strides, padding, dilations=inner.dilation_rate)
        if self.bias is not None:
            y = tf.nn.bias_add(y, tf.constant(self.bias))
        y = inner.activation(y)
        if isinstance(inner, keras.layers.Dense):
            y = tf.reshape(y, (-1,) + shape[:-1] + (self.kernel.shape[-1],))
        return y


class _BatchFreeReshape(keras.layers.Layer):
    """A Flatten / Reshape layer as one reshape to a constant shape whose batch is -1: Keras' own reads the
    batch size from a SHAPE operation when the batch is free, which the XNNPACK delegate does not take."""

    def __init__(self, layer: Any):
        super().__init__(name=layer.name)
        self.target = None if isinstance(layer, keras.layers.Flatten) else tuple(layer.target_shape)

    def call(self, x):
        import tensorflow as tf

        size = int(np.prod(tuple(x.shape)[1:], dtype=np.int64))  # per sample: every dimension but the batch is known
        if self.target is None:
            return tf.reshape(x, (-1, size))
        known = int(np.prod([d for d in self.target if d != -1], dtype=np.int64))
        return tf.reshape(x, (-1,) + tuple(size // known if d == -1 else int(d) for d in self.target))


def _integer_model(model: Any, batch_size: Optional[int]) -> Any:
    float_kernels = [layer.name for layer in model.layers if layer.weights and not isinstance(
        layer, (KerasQuantizationWrapper, KerasActivationQuantizationHolder))]
    if float_kernels:
        raise ExportError(f"layers {float_kernels[:6]} keep float weights (the TPC does not quantize them); in a fully integer "
                          "file TensorFlow's converter would quantize them by its own rule, unlike the simulated model: "
                          "quantize them with a TPC that covers them, or export FAKELY_QUANT")
    holders = [layer for layer in model.layers if isinstance(layer, KerasActivationQuantizationHolder)]
    several_inputs = {h.name for h in holders if len(_upstream_quantized(h.input)) > 1}

    def replace(layer):
        if isinstance(layer, KerasActivationQuantizationHolder):
            return _FakeQuantActivation(layer, tie_break=layer.name in several_inputs)
        if isinstance(layer, KerasQuantizationWrapper):
            return _IntegerKernelLayer(layer)
        # a Flatten (channels last: no transpose) or a Reshape, which _BatchFreeReshape computes alike
        if isinstance(layer, keras.layers.Flatten) and getattr(layer, "data_format", "channels_last") == "channels_last" \
                or isinstance(layer, keras.layers.Reshape):
            return _BatchFreeReshape(layer)
        return layer

    inputs = [keras.Input(batch_shape=(batch_size,) + tuple(t.shape[1:]), dtype=t.dtype, name=t.name.split(":")[0])
              for t in model.inputs]
    return keras.models.clone_model(model, clone_function=replace, input_tensors=inputs if len(inputs) > 1 else inputs[0])


def read_tflite(tflite: bytes) -> tuple:
    """(the file's flatbuffer object, each operator code's builtin name: kinds[op.opcodeIndex])."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    flat = flatbuffer_utils.convert_bytearray_to_object(bytearray(tflite))
    return flat, [names.get(max(c.builtinCode, c.deprecatedBuiltinCode), str(c.builtinCode)) for c in flat.operatorCodes]


def float_operations(tflite: bytes) -> List[str]:
    """The operations of a TFLite file that compute on floats, other than the QUANTIZE of a graph input
    and the DEQUANTIZE of a graph output, as "OP(output tensor name)"."""
    from tensorflow.lite.python import schema_py_generated as schema

    integer = {schema.TensorType.INT8, schema.TensorType.INT32}
    flat, kinds = read_tflite(tflite)
    out = []
    for graph in flat.subgraphs:
        inputs, outputs = set(graph.inputs), set(graph.outputs)
        for op in graph.operators:
            kind = kinds[op.opcodeIndex]
            if (kind == "QUANTIZE" and set(op.inputs) <= inputs) or (kind == "DEQUANTIZE" and set(op.outputs) <= outputs):
                continue
            if any(graph.tensors[i].type not in integer for i in list(op.inputs) + list(op.outputs) if i >= 0):
                out.append(f"{kind}({graph.tensors[op.outputs[0]].name.decode()[:80]})")
    return out


def check_batch_size(batch_size: Any) -> Optional[int]:
    """None (a free batch: the file resizes) or a positive int (a fixed batch); anything else refused."""
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ExportError(f"batch_size must be a positive int (a fixed batch) or None (a free batch the file resizes "
                          f"to), got {batch_size!r}")
    return int(batch_size)


def int8_tflite(model: Any, batch_size: Optional[int] = None) -> bytes:
    """The fully integer TFLite flatbuffer of a quantized Keras model (float input / output, quantized at
    the edges). ``batch_size`` None: a free batch (the input's shape signature is -1, its size 1 until
    ``interpreter.resize_tensor_input``); an int: that batch, fixed."""
    import tensorflow as tf

    batch_size = check_batch_size(batch_size)

    converter = tf.lite.TFLiteConverter.from_keras_model(_integer_model(model, batch_size))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        # the converter prints its SavedModel's signature and warns that the float input has no
        # statistics (the first fake-quant op gives them): neither is the user's concern
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            data = converter.convert()
    except Exception as e:  # noqa: BLE001 - the converter's own errors, said plainly
        raise ExportError(f"TensorFlow's converter refused the integer model: {type(e).__name__}: "
                          f"{str(e).splitlines()[0]}") from e
    left = float_operations(data)
    if left:
        raise ExportError(f"the TFLite INT8 graph would keep {len(left)} float operations: {left[:6]}; each needs its "
                          "input and output quantized (an operation the TPC leaves unquantized stays float): export "
                          "FAKELY_QUANT, or quantize those activations")
    return data


def _interpreter(tflite: bytes, **kwargs: Any) -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # TensorFlow's own interpreter (deprecated, slower) when ai-edge-litert is not installed
        from tensorflow.lite.python.interpreter import Interpreter
    return Interpreter(model_content=tflite, **kwargs)


def _upstream_quantized(tensor: Any) -> List[Any]:
    """The nearest quantized tensors (holder outputs) or model inputs that `tensor` is computed from."""
    operation = tensor._keras_history.operation
    if isinstance(operation, (KerasActivationQuantizationHolder, keras.layers.InputLayer)):
        return [tensor]
    out: List[Any] = []
    for t in operation._inbound_nodes[tensor._keras_history.node_index].input_tensors:
        out += [u for u in _upstream_quantized(t) if all(u is not v for v in out)]
    return out


def _numpy(x: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def layer_parity(model: Any, tflite: bytes, x: Any) -> Dict[str, float]:
    """Per activation holder of `model`: the largest difference, in quantization steps, between the TFLite
    file's integer tensor and the simulated layer(s) that produce it, fed the file's own integer inputs
    to that layer (identical inputs: differences do not accumulate along the graph). `x`: one sample
    per model input (the file's fixed batch). NaN where the file holds no tensor of that size and grid
    (the converter fused the quantized operation into the next one, as a convolution into its ReLU6:
    the next holder is then compared with the simulated pair)."""
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    holders = [layer for layer in model.layers if isinstance(layer, KerasActivationQuantizationHolder)]
    whole = [_numpy(v) for v in keras.Model(model.inputs, [h.output for h in holders])(xs)]
    with warnings.catch_warnings():  # keeping every tensor is what this check is for
        warnings.simplefilter("ignore")
        interpreter = _interpreter(tflite, experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), xs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    integer = [t for t in interpreter.get_tensor_details() if t["dtype"] == np.int8 and t["quantization"][0] > 0]

    def candidates(holder: Any, size: int) -> List[np.ndarray]:
        """The file's tensors of the holder's size and grid, dequantized (int8 keeps an unsigned grid
        128 lower)."""
        grid = holder.activation_holder_quantizer.grid
        scale, zero_point = float(np.asarray(grid.scale)), int(np.asarray(grid.zero_point)) - 128 * (grid.qmin == 0)
        return [(interpreter.get_tensor(t["index"]).astype(np.float64) - zero_point) * t["quantization"][0]
                for t in integer if np.prod(t["shape"]) == size and t["quantization"][1] == zero_point
                and np.isclose(t["quantization"][0], scale, rtol=2 * TIE_BREAK)]

    def closest(found: List[np.ndarray], reference: np.ndarray) -> tuple:
        diffs = [np.abs(f.reshape(reference.shape) - reference).max() for f in found]
        return (found[int(np.argmin(diffs))].reshape(reference.shape), min(diffs)) if found else (None, np.inf)

    found = {h.name: candidates(h, sim.size) for h, sim in zip(holders, whole)}
    in_file = {h.name: closest(found[h.name], sim)[0] for h, sim in zip(holders, whole)}
    inputs = {t._keras_history.operation.name: v for t, v in zip(model.inputs, xs)}

    def present_upstream(tensor: Any) -> List[Any]:
        """The nearest upstream tensors the file holds (a holder the converter fused away is looked through)."""
        out: List[Any] = []
        for t in _upstream_quantized(tensor):
            name = t._keras_history.operation.name
            found = [t] if name in inputs or in_file.get(name) is not None else present_upstream(t._keras_history.operation.input)
            out += [u for u in found if all(u is not v for v in out)]
        return out

    out = {}
    for holder, _sim in zip(holders, whole):
        if in_file[holder.name] is None:  # e.g. a convolution's output quantized before a ReLU6 the converter fused into it
            out[holder.name] = float("nan")
            continue
        upstream = present_upstream(holder.input)
        feeds = [inputs.get(t._keras_history.operation.name, in_file.get(t._keras_history.operation.name)) for t in upstream]
        segment = _numpy(keras.Model(upstream, holder.output)(feeds))
        out[holder.name] = float(closest(found[holder.name], segment)[1] / float(np.asarray(
            holder.activation_holder_quantizer.grid.scale)))
    return out
