"""A node's final quantization config as the configs of its trainable quantizers, and the trainable
quantizer class of each node (framework-free; QAT and GPTQ both start from the PTQ result this way)."""
from __future__ import annotations

import inspect
from enum import Enum
from typing import Any, Callable, Dict, List, Optional, Tuple

from hwquant.core.graph.model_graph import Graph, Node
from hwquant.errors import InvalidConfigError
from hwquant.trainable_infrastructure.common import QuantizationTarget, get_trainable_quantizer_class
from hwquant.trainable_infrastructure.config import (TrainableQuantizerActivationConfig,
                                                     TrainableQuantizerCandidateConfig, TrainableQuantizerWeightsConfig)


def _candidates(found: List[Tuple[int, Dict[str, Any]]]) -> Optional[List[TrainableQuantizerCandidateConfig]]:
    """Mixed-precision candidates from (bit width, quantization parameters) pairs, the first parameters of
    each bit width (None when there is a single one)."""
    seen: Dict[int, Dict[str, Any]] = {}  # bit width -> its quantization parameters
    for bits, params in found:
        seen.setdefault(bits, dict(params))
    return [TrainableQuantizerCandidateConfig(n_bits=b, quantization_params=p) for b, p in seen.items()] \
        if len(seen) > 1 else None


def trainable_weights_config(node: Node, attr: str) -> TrainableQuantizerWeightsConfig:
    """The config of a trainable quantizer for the weight ``attr`` of ``node`` (its final config)."""
    wcfg = node.final_config.weights_quantization_cfg
    wc = wcfg.get_attr_config(attr)
    configs = [c.weights_quantization_cfg.attrs.get(attr) for c in node.candidates or []]
    candidates = _candidates([(c.weights_n_bits, c.weights_quantization_params) for c in configs
                              if c is not None and c.enable_weights_quantization and c.weights_quantization_params])
    return TrainableQuantizerWeightsConfig(
        weights_quantization_method=wc.weights_quantization_method, weights_n_bits=wc.weights_n_bits,
        weights_quantization_params=dict(wc.weights_quantization_params),
        enable_weights_quantization=wc.enable_weights_quantization,
        weights_channels_axis=wc.weights_channels_axis if wc.weights_per_channel_threshold else None,
        weights_per_channel_threshold=wc.weights_per_channel_threshold, min_threshold=wcfg.min_threshold,
        weights_quantization_candidates=candidates)


def trainable_activation_config(node: Node) -> TrainableQuantizerActivationConfig:
    """The config of a trainable quantizer for the output of ``node`` (its final config)."""
    ac = node.final_config.activation_quantization_cfg
    configs = [c.activation_quantization_cfg for c in node.candidates or []]
    candidates = _candidates([(c.activation_n_bits, c.activation_quantization_params) for c in configs
                              if c.quantized and c.activation_quantization_params])
    return TrainableQuantizerActivationConfig(
        activation_quantization_method=ac.activation_quantization_method, activation_n_bits=ac.activation_n_bits,
        activation_quantization_params=dict(ac.activation_quantization_params),
        enable_activation_quantization=ac.quantized, min_threshold=ac.min_threshold,
        activation_quantization_candidates=candidates)


# (identifier: a TrainingMethod or a RoundingType, base class, constructor overrides)
QuantizerChoice = Tuple[Enum, type, Dict[str, Any]]


def trainable_quantizer_classes(graph: Graph, kernel_attr: Callable[[Node], Optional[str]], weights: QuantizerChoice,
                                activations: QuantizerChoice, what: str) -> Tuple[Dict[str, type], Dict[str, type]]:
    """The trainable quantizer class of each quantized kernel and activation ({node name: class}),
    checked up front (with the constructor overrides) so that one error names every node that cannot
    be trained."""
    found: Tuple[Dict[str, type], Dict[str, type]] = ({}, {})
    problems = []
    for node in graph:
        cfg = node.final_config
        if cfg is None:
            continue
        attr = kernel_attr(node)
        wc = cfg.weights_quantization_cfg.attrs.get(attr) if attr is not None else None
        ac = cfg.activation_quantization_cfg
        wanted = [(0, QuantizationTarget.Weights, wc.weights_quantization_method, "kernel")
                  if wc is not None and wc.enable_weights_quantization and attr in node.weights else None,
                  (1, QuantizationTarget.Activation, ac.activation_quantization_method, "activation")
                  if ac.quantized else None]
        for i, target, method, label in filter(None, wanted):
            identifier, base, _ = (weights, activations)[i]
            try:
                found[i][node.name] = get_trainable_quantizer_class(target, identifier, method, base)
            except InvalidConfigError as e:
                problems.append(f"'{node.name}' {label}: {e}")
    if problems:
        raise InvalidConfigError(f"{what} cannot train every quantizer:\n  " + "\n  ".join(problems))
    for which, classes, (_, _, override) in (("weight", found[0], weights), ("activation", found[1], activations)):
        for cls in set(classes.values()):
            accepted = [p for p in inspect.signature(cls).parameters if p != "quantization_config"]
            unknown = sorted(set(override) - set(accepted))
            if unknown:
                raise InvalidConfigError(f"{which} quantizer params override has {unknown}, which {cls.__name__} does "
                                         f"not take; it accepts {accepted}")
    return found


class QATQuantizers:
    """The trainable quantizers of a QAT model, from PTQ's graph and a QATConfig: every class looked up
    (and the constructor overrides checked) up front; ``weights(node, attr)`` / ``activation(node)`` make
    one, with the node's final config as its start. ``base``: the framework's trainable-quantizer base."""

    def __init__(self, graph: Graph, kernel_attr: Callable[[Node], Optional[str]], qat_config: Any, base: type):
        self._w_kwargs = qat_config.weight_quantizer_params_override
        self._a_kwargs = qat_config.activation_quantizer_params_override
        self.weight_classes, self.activation_classes = trainable_quantizer_classes(
            graph, kernel_attr, (qat_config.weight_training_method, base, self._w_kwargs),
            (qat_config.activation_training_method, base, self._a_kwargs), "quantization-aware training")

    def weights(self, node: Node, attr: str) -> Any:
        return self.weight_classes[node.name](trainable_weights_config(node, attr), **self._w_kwargs)

    def activation(self, node: Node) -> Any:
        return self.activation_classes[node.name](trainable_activation_config(node), **self._a_kwargs)

    def __str__(self) -> str:
        return f"{len(self.weight_classes)} trainable weight quantizers, {len(self.activation_classes)} activation quantizers"

