"""Framework-free configs of trainable (QAT / GPTQ) quantizers, validated, with a dict round-trip.

``get_config()`` returns plain data (enums as ints, candidates as dicts) so a quantizer's config can be
stored with a model and rebuilt by ``from_config()``; parameter dicts are copied shallowly, their values
(numbers, arrays) kept as they are.
"""
from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Dict, List, Optional

from pydantic import BeforeValidator, field_validator, model_validator

from hwquant.core.configuration.config import Flag, NBits, PositiveFinite, QMethod, ValidatedConfig

__all__ = ["TrainableQuantizerCandidateConfig", "TrainableQuantizerWeightsConfig", "TrainableQuantizerActivationConfig"]


def _check_params(v: Any) -> Any:
    if not isinstance(v, dict):
        raise ValueError(f"must be a dict of quantization parameters (e.g. {{'threshold': ...}}), "
                         f"got {type(v).__name__}")
    bad = [k for k in v if not isinstance(k, str)]
    if bad:
        raise ValueError(f"parameter names must be str, got {bad!r}")
    return dict(v)


_Params = Annotated[Dict[str, Any], BeforeValidator(_check_params)]


class _TrainableConfig(ValidatedConfig):
    def get_config(self) -> Dict[str, Any]:
        out = {}
        for name in type(self).model_fields:
            v = getattr(self, name)
            if isinstance(v, dict):
                v = dict(v)
            elif isinstance(v, list):
                v = [c.get_config() for c in v]
            elif isinstance(v, Enum):  # QuantizationMethod -> int
                v = v.value
            out[name] = v
        return out

    @classmethod
    def from_config(cls, config: Dict[str, Any]):
        if not isinstance(config, dict):
            raise TypeError(f"{cls.__name__}.from_config expects a dict, got {type(config).__name__}")
        return cls(**config)


class TrainableQuantizerCandidateConfig(_TrainableConfig):
    """One mixed-precision candidate of a trainable quantizer: its bit width and parameters."""

    n_bits: NBits
    quantization_params: _Params


def _candidates(v: Any) -> Any:
    if v is None:
        return v
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"must be None or a non-empty list of TrainableQuantizerCandidateConfig, got {v!r}")
    items = [TrainableQuantizerCandidateConfig.from_config(c) if isinstance(c, dict) else c for c in v]
    for i, c in enumerate(items):
        if not isinstance(c, TrainableQuantizerCandidateConfig):
            raise ValueError(f"item {i} must be a TrainableQuantizerCandidateConfig (or its dict), got {c!r}")
    bits = [c.n_bits for c in items]
    if len(set(bits)) != len(bits):
        raise ValueError(f"candidates must have distinct n_bits, got {bits}")
    return items


_Candidates = Annotated[Optional[List[TrainableQuantizerCandidateConfig]], BeforeValidator(_candidates)]


class TrainableQuantizerWeightsConfig(_TrainableConfig):
    """Configuration of a trainable weights quantizer. Per-channel quantization needs an int
    weights_channels_axis; per-tensor takes None (or an int, ignored)."""

    weights_quantization_method: QMethod
    weights_n_bits: NBits
    weights_quantization_params: _Params
    enable_weights_quantization: Flag
    weights_channels_axis: Optional[Any]
    weights_per_channel_threshold: Flag
    min_threshold: PositiveFinite
    weights_quantization_candidates: _Candidates = None

    @field_validator("weights_channels_axis", mode="before")
    @classmethod
    def _axis(cls, v: Any) -> Any:
        # A (out, in) pair as FrameworkInfo gives it is accepted; the quantizer uses the out axis.
        if isinstance(v, tuple) and len(v) == 2:
            v = v[0]
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError(f"must be an int axis or None, got {v!r}")
        return v

    @model_validator(mode="after")
    def _per_channel_needs_axis(self):
        if self.weights_per_channel_threshold and self.weights_channels_axis is None:
            raise ValueError("weights_per_channel_threshold=True needs an int weights_channels_axis (the output "
                             "channel axis), got None; give the axis or set weights_per_channel_threshold=False")
        return self

    @property
    def weights_bits_candidates(self) -> Optional[List[TrainableQuantizerCandidateConfig]]:
        """MCT's attribute name for the candidates."""
        return self.weights_quantization_candidates


class TrainableQuantizerActivationConfig(_TrainableConfig):
    """Configuration of a trainable activation quantizer."""

    activation_quantization_method: QMethod
    activation_n_bits: NBits
    activation_quantization_params: _Params
    enable_activation_quantization: Flag
    min_threshold: PositiveFinite
    activation_quantization_candidates: _Candidates = None

    @property
    def activation_bits_candidates(self) -> Optional[List[TrainableQuantizerCandidateConfig]]:
        """MCT's attribute name for the candidates."""
        return self.activation_quantization_candidates
