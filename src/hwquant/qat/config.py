"""QATConfig: how quantization-aware training trains the quantizers (framework-free)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from pydantic import Field, field_validator

from hwquant.core.configuration.config import ValidatedConfig
from hwquant.trainable_infrastructure.common import TrainingMethod, _as_member, quantizer_params_override

__all__ = ["QATConfig"]


class QATConfig(ValidatedConfig):
    """Training methods of the weight and activation quantizers, and keyword arguments passed to
    every weight / activation quantizer's constructor (e.g. ``{"freeze_quant_params": True}``);
    keys a quantizer does not take are refused when the QAT model is built."""

    weight_training_method: Any = TrainingMethod.STE
    activation_training_method: Any = TrainingMethod.STE
    weight_quantizer_params_override: Optional[Dict[str, Any]] = Field(default_factory=dict)
    activation_quantizer_params_override: Optional[Dict[str, Any]] = Field(default_factory=dict)

    @field_validator("weight_training_method", "activation_training_method", mode="before")
    @classmethod
    def _method(cls, v: Any) -> TrainingMethod:
        try:
            return _as_member(TrainingMethod, v, "the training method")
        except Exception as e:  # pydantic reports ValueErrors with the field name
            raise ValueError(str(e)) from None

    _override = field_validator("weight_quantizer_params_override", "activation_quantizer_params_override",
                                mode="before")(quantizer_params_override)
