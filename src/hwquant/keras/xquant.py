"""mct.xquant's Keras facades (MCT has the plain report for Keras; the troubleshooting one is hwquant's)
and the report's Keras back end (the report itself: hwquant.xquant)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import keras
import numpy as np

from hwquant.concurrency import keras_call
from hwquant.keras.inference import predict_on_batch
from hwquant.xquant.analysis import XQuantInputError, model_inputs
from hwquant.xquant.backend import BatchRun, LayerFacts, QuantizerFacts
from hwquant.xquant.config import XQuantConfig
from hwquant.xquant.report import RunSettings, run_report

HOLDER_SUFFIX = "_activation_holder_quantizer"
WRAPPER_PREFIX = "quant_"


def _flat(outputs: Any) -> List[np.ndarray]:
    return [np.asarray(keras.ops.convert_to_numpy(o), np.float32) for o in keras.tree.flatten(outputs)]


def _feed(model: Any, batch: List[Any]) -> Any:
    """The batch in the structure the model was built with (a list of one input for a model built from a
    list; Keras warns on any other)."""
    struct = getattr(model, "_inputs_struct", None)
    return list(batch) if isinstance(struct, (list, tuple)) or len(batch) > 1 else batch[0]


class KerasXQuantBackend:
    """The float model, the reference graph made from it, and the quantized model, run side by side."""

    framework = "keras"

    def __init__(self, float_model: Any, quantized_model: Any, repr_dataset: Callable[[], Any], settings: RunSettings):
        from hwquant.core.configuration.config import CoreConfig
        from hwquant.core.pipeline.stages import prepare
        from hwquant.keras.session import start_session
        from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper

        for what, model in (("float_model", float_model), ("quantized_model", quantized_model)):
            if not isinstance(model, keras.Model):
                raise XQuantInputError(f"{what} must be a keras.Model, got {type(model).__name__}")
        self.float_model, self.quantized_model, self.repr_dataset = float_model, quantized_model, repr_dataset
        state = start_session(float_model, repr_dataset,
                              CoreConfig(quantization_config=settings.core_config.quantization_config), settings.tpc).state
        prepare(state)
        self.reference, self.adapter = state.graph, state.adapter
        self._outputs: Dict[str, Any] = {}   # node -> the quantized model's tensor compared there
        self._layers: Dict[str, LayerFacts] = {}
        for layer in quantized_model.layers:
            if isinstance(layer, KerasActivationQuantizationHolder):
                node = layer.name.removesuffix(HOLDER_SUFFIX)
                facts = self._layers.setdefault(node, LayerFacts(node, ""))
                facts.activation = QuantizerFacts.of(layer.activation_holder_quantizer)
                self._outputs[node] = layer.output
            elif isinstance(layer, KerasQuantizationWrapper):
                node = layer.name.removeprefix(WRAPPER_PREFIX)
                facts = self._layers.setdefault(node, LayerFacts(node, ""))
                facts.layer_type = type(layer.layer).__name__
                facts.weights = {k: f for k, q in layer.weights_quantizers.items() if (f := QuantizerFacts.of(q)) is not None}
                bias = getattr(layer.layer, "bias", None)
                facts.bias = None if bias is None or "bias" in facts.weights else np.asarray(
                    keras.ops.convert_to_numpy(bias), np.float32)
                self._outputs.setdefault(node, layer.output)
        for name, facts in self._layers.items():
            if not facts.layer_type:
                node = self.reference.node(name) if name in self.reference else None
                facts.layer_type = getattr(getattr(node, "type", None), "__name__", str(getattr(node, "type", "input")))
        self._observers: Dict[Tuple[str, ...], Tuple[Any, Any, List[str]]] = {}

    def layers(self) -> List[LayerFacts]:
        return list(self._layers.values())

    def batches(self, dataset: Callable[[], Any], validation: bool) -> Iterator[List[Any]]:
        for item in dataset():
            yield [np.asarray(keras.ops.convert_to_numpy(x)) for x in model_inputs(item, validation)]

    def _observer(self, names: Sequence[str]) -> Tuple[Any, Any, List[str]]:
        from hwquant.keras.builder import build_model
        key = tuple(names)
        if key not in self._observers:
            quantized_names = [n for n in names if n in self._outputs]
            extractor = keras.Model(self.quantized_model.inputs,
                                    [self.quantized_model.outputs, [self._outputs[n] for n in quantized_names]])
            self._observers = {key: (build_model(self.reference, extra_outputs=list(names)), extractor, quantized_names)}
        return self._observers[key]

    def run(self, batch: List[Any], names: Sequence[str]) -> BatchRun:
        reference, extractor, quantized_names = self._observer(names)
        float_outputs = _flat(predict_on_batch(self.float_model, _feed(self.float_model, batch)))
        _, values = predict_on_batch(reference, _feed(reference, batch))
        float_tensors = {n: np.asarray(v, np.float32) for n, v in zip(names, values)}
        outs, q_values = predict_on_batch(extractor, _feed(extractor, batch))
        quantized = {n: np.asarray(v, np.float32) for n, v in zip(quantized_names, q_values)}
        for name in names:
            quantized.setdefault(name, float_tensors[name])
        return BatchRun(float_outputs, _flat(outs), float_tensors, quantized)

    def output_sensitivity(self, batch: List[Any], names: Sequence[str], probes: np.ndarray) -> Dict[str, float]:
        from hwquant.keras.gradients import gradients
        reference, _, _ = self._observer(names)
        totals = dict.fromkeys(names, 0.0)
        for probe in probes:
            def forward(xs, probe=probe):
                outputs, tensors = reference(xs if len(xs) > 1 else xs[0], training=False)
                flat = keras.ops.concatenate([keras.ops.reshape(o, (-1,)) for o in keras.tree.flatten(outputs)])
                weights = keras.ops.convert_to_tensor(probe[:int(flat.shape[0])])
                return keras.ops.sum(flat * keras.ops.cast(weights, flat.dtype)), list(tensors)
            for name, g in zip(names, gradients(forward, batch, "the troubleshooting report's layer ranking")):
                if g is not None:
                    totals[name] += float(np.square(g, dtype=np.float64).sum()) / (len(batch[0]) * len(probes))
        return totals

    def native(self, array: np.ndarray) -> np.ndarray:
        return array

    def quantize(self, core_config: Any, tpc: Any, target: Any) -> Any:
        from hwquant.keras.facade import keras_post_training_quantization
        return keras_post_training_quantization(self.float_model, self.repr_dataset, target, core_config, tpc)[0]

    def quantize_gptq(self, core_config: Any, tpc: Any, n_epochs: int) -> Any:
        from hwquant.keras.gptq.facade import get_keras_gptq_config
        from hwquant.keras.gptq.facade import keras_gradient_post_training_quantization
        return keras_gradient_post_training_quantization(
            self.float_model, self.repr_dataset, get_keras_gptq_config(n_epochs), core_config=core_config,
            target_platform_capabilities=tpc)[0]

    def outputs(self, model: Any, batch: List[Any]) -> List[np.ndarray]:
        return _flat(predict_on_batch(model, _feed(model, batch)))


def load_float_model(path: str, trust: bool = False) -> Any:
    """A .keras / .h5 model file; a Lambda layer's Python bytecode is refused unless `trust` (hwquant.keras.
    model_files)."""
    from hwquant.keras.model_files import load_keras_model
    return load_keras_model(path, trust=trust)


def _report(float_model: Any, quantized_model: Any, repr_dataset: Callable, validation_dataset: Callable,
            xquant_config: Any, troubleshoot: bool):
    return run_report(lambda settings: KerasXQuantBackend(float_model, quantized_model, repr_dataset, settings),
                      dict(getattr(quantized_model, "hwquant_metadata", None) or {}), repr_dataset, validation_dataset,
                      xquant_config, troubleshoot)


@keras_call
def xquant_report_keras_experimental(float_model: Any, quantized_model: Any, repr_dataset: Callable[[], Any],
                                     validation_dataset: Callable[[], Any], xquant_config: XQuantConfig):
    """MCT's report for Keras: the similarity dictionary (MCT's keys), with hwquant's report.html, report.json and
    measured fixes written into ``xquant_config.report_dir``."""
    return _report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, False)[0]


@keras_call
def xquant_report_troubleshoot_keras_experimental(float_model: Any, quantized_model: Any,
                                                  repr_dataset: Callable[[], Any],
                                                  validation_dataset: Callable[[], Any], xquant_config: XQuantConfig):
    """The troubleshooting report for Keras (MCT has it for PyTorch only): (similarity dictionary, judged causes)."""
    return _report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, True)
