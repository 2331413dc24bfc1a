"""A node's final quantization config as the configs of its trainable quantizers (framework-free;
QAT and GPTQ both start from the PTQ result this way)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from hwquant.core.graph import Node
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
