"""A node's final quantization config as the configs of its trainable quantizers (framework-free;
QAT and GPTQ both start from the PTQ result this way)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from hwquant.core.graph import Node
from hwquant.trainable_infrastructure.config import (TrainableQuantizerActivationConfig,
                                                     TrainableQuantizerCandidateConfig, TrainableQuantizerWeightsConfig)


def _weights_candidates(node: Node, attr: str) -> Optional[List[TrainableQuantizerCandidateConfig]]:
    """The node's mixed-precision candidates of ``attr`` (None when it has a single one)."""
    seen: Dict[int, Dict[str, Any]] = {}  # bit width -> its quantization parameters
    for c in node.candidates or []:
        wc = c.weights_quantization_cfg.attrs.get(attr)
        if wc is not None and wc.enable_weights_quantization and wc.weights_quantization_params:
            seen.setdefault(wc.weights_n_bits, dict(wc.weights_quantization_params))
    return [TrainableQuantizerCandidateConfig(n_bits=b, quantization_params=p) for b, p in seen.items()] \
        if len(seen) > 1 else None


def _activation_candidates(node: Node) -> Optional[List[TrainableQuantizerCandidateConfig]]:
    seen: Dict[int, Dict[str, Any]] = {}  # bit width -> its quantization parameters
    for c in node.candidates or []:
        ac = c.activation_quantization_cfg
        if ac.quantized and ac.activation_quantization_params:
            seen.setdefault(ac.activation_n_bits, dict(ac.activation_quantization_params))
    return [TrainableQuantizerCandidateConfig(n_bits=b, quantization_params=p) for b, p in seen.items()] \
        if len(seen) > 1 else None


def trainable_weights_config(node: Node, attr: str) -> TrainableQuantizerWeightsConfig:
    """The config of a trainable quantizer for the weight ``attr`` of ``node`` (its final config)."""
    wcfg = node.final_config.weights_quantization_cfg
    wc = wcfg.get_attr_config(attr)
    return TrainableQuantizerWeightsConfig(
        weights_quantization_method=wc.weights_quantization_method, weights_n_bits=wc.weights_n_bits,
        weights_quantization_params=dict(wc.weights_quantization_params),
        enable_weights_quantization=wc.enable_weights_quantization,
        weights_channels_axis=wc.weights_channels_axis if wc.weights_per_channel_threshold else None,
        weights_per_channel_threshold=wc.weights_per_channel_threshold, min_threshold=wcfg.min_threshold,
        weights_quantization_candidates=_weights_candidates(node, attr))


def trainable_activation_config(node: Node) -> TrainableQuantizerActivationConfig:
    """The config of a trainable quantizer for the output of ``node`` (its final config)."""
    ac = node.final_config.activation_quantization_cfg
    return TrainableQuantizerActivationConfig(
        activation_quantization_method=ac.activation_quantization_method, activation_n_bits=ac.activation_n_bits,
        activation_quantization_params=dict(ac.activation_quantization_params),
        enable_activation_quantization=ac.quantized, min_threshold=ac.min_threshold,
        activation_quantization_candidates=_activation_candidates(node))
