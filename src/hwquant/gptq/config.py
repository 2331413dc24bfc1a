"""GPTQ configuration (framework-free): GradientPTQConfig and its parts, with MCT 2.6's fields and
defaults. The optimizers are kept as given (a framework optimizer, its class, or a factory) and
interpreted by the framework's GPTQ runner."""
from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Dict, Optional

from pydantic import BeforeValidator, Field, field_validator, model_validator

from hwquant.core.configuration.config import Flag, OptCallable, ValidatedConfig, _rule, as_int, as_real, enum_coercer
from hwquant.errors import InvalidConfigError
from hwquant.trainable_infrastructure.common import quantizer_params_override

__all__ = ["RoundingType", "GPTQHessianScoresConfig", "QFractionLinearAnnealingConfig",
           "GradualActivationQuantizationConfig", "GradientPTQConfig", "ACT_HESSIAN_DEFAULT_BATCH_SIZE"]

ACT_HESSIAN_DEFAULT_BATCH_SIZE = 32
PositiveInt = Annotated[int, BeforeValidator(as_int), _rule(lambda v: v >= 1, "must be an int >= 1")]
NonNegativeInt = Annotated[int, BeforeValidator(as_int), _rule(lambda v: v >= 0, "must be an int >= 0")]
Fraction = Annotated[float, BeforeValidator(as_real), _rule(lambda v: 0 <= v <= 1, "must be in [0, 1]")]


class RoundingType(Enum):
    """How GPTQ learns each weight's rounding: STE (straight-through) or SoftQuantizer (a learned
    soft rounding with a regulariser that pushes it to 0 / 1)."""
    STE = 0
    SoftQuantizer = 1


class GPTQHessianScoresConfig(ValidatedConfig):
    """Hessian-based weights of the GPTQ loss. ``per_sample`` gives each sample its own weight
    (sample-layer attention); ``norm_scores`` / ``log_norm`` default to ``not per_sample``."""

    per_sample: Flag
    hessians_num_samples: Optional[PositiveInt]
    norm_scores: Optional[Flag] = None
    log_norm: Optional[Flag] = None
    scale_log_norm: Flag = False
    hessian_batch_size: PositiveInt = ACT_HESSIAN_DEFAULT_BATCH_SIZE

    @model_validator(mode="after")
    def _defaults(self):
        for name in ("norm_scores", "log_norm"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, not self.per_sample)
        return self


class QFractionLinearAnnealingConfig(ValidatedConfig):
    """The quantized fraction of gradual activation quantization, linear from ``initial_q_fraction``
    at ``start_step`` to ``target_q_fraction`` at ``end_step`` (None: the last step)."""

    initial_q_fraction: Fraction
    target_q_fraction: Fraction
    start_step: NonNegativeInt
    end_step: Optional[NonNegativeInt]

    @model_validator(mode="after")
    def _order(self):
        if not self.initial_q_fraction < self.target_q_fraction:
            raise ValueError(f"needs 0 <= initial_q_fraction < target_q_fraction <= 1, got initial_q_fraction="
                             f"{self.initial_q_fraction}, target_q_fraction={self.target_q_fraction}")
        if self.end_step is not None and self.end_step <= self.start_step:
            raise ValueError(f"needs start_step < end_step, got start_step={self.start_step}, end_step={self.end_step}")
        return self


class GradualActivationQuantizationConfig(ValidatedConfig):
    """Gradual activation quantization: each quantized activation is ``q * f + x * (1 - f)`` with the
    quantized fraction ``f`` following the scheduler (by default linearly from 0 to 1)."""

    q_fraction_scheduler_policy: QFractionLinearAnnealingConfig = Field(default_factory=lambda: QFractionLinearAnnealingConfig(
        initial_q_fraction=0.0, target_q_fraction=1.0, start_step=0, end_step=None))

    @field_validator("q_fraction_scheduler_policy", mode="before")
    @classmethod
    def _policy(cls, v: Any) -> Any:
        if not isinstance(v, QFractionLinearAnnealingConfig):
            raise ValueError(f"must be a QFractionLinearAnnealingConfig (the only scheduler), got {type(v).__name__}")
        return v


def _instance_or_none(cls: type):
    def check(v: Any) -> Any:
        if v is not None and not isinstance(v, cls):
            raise ValueError(f"must be a {cls.__name__} or None, got {type(v).__name__}")
        return v
    return check


class GradientPTQConfig(ValidatedConfig):
    """Configuration of gradient-based PTQ (MCT 2.6's fields, in its order)."""

    n_epochs: PositiveInt
    loss: OptCallable
    optimizer: Any
    optimizer_rest: Any
    train_bias: Flag
    hessian_weights_config: Optional[GPTQHessianScoresConfig]
    gradual_activation_quantization_config: Optional[GradualActivationQuantizationConfig]
    regularization_factor: Annotated[float, BeforeValidator(as_real), _rule(lambda v: v >= 0, "must be >= 0")]
    rounding_type: Annotated[RoundingType, enum_coercer(RoundingType)] = RoundingType.SoftQuantizer
    optimizer_quantization_parameter: Any = None
    optimizer_bias: Any = None
    log_function: OptCallable = None
    gptq_quantizer_params_override: Optional[Dict[str, Any]] = Field(default_factory=dict)

    _override = field_validator("gptq_quantizer_params_override", mode="before")(quantizer_params_override)
    _hessian = field_validator("hessian_weights_config", mode="before")(_instance_or_none(GPTQHessianScoresConfig))
    _gradual = field_validator("gradual_activation_quantization_config", mode="before")(
        _instance_or_none(GradualActivationQuantizationConfig))


# MCT 2.6's defaults of get_pytorch_gptq_config / get_keras_gptq_config
LR_DEFAULT = 3e-2        # the rounding variables
LR_REST_DEFAULT = 1e-4   # the quantizers' other parameters
LR_BIAS_DEFAULT = 1e-4
BIAS_MOMENTUM = 0.9
REG_DEFAULT = 0.01       # rounding regulariser factor, loss without sample-layer attention
REG_DEFAULT_SLA = 10.0   # ... with sample-layer attention (its loss is on another scale)
HESSIAN_NUM_SAMPLES = 256


def check_given_optimizers(optimizer: Any, optimizer_rest: Any, base: type, example: str) -> None:
    """A config getter's optimizers: None or an instance of the framework's ``base`` (``example``: one, as
    ``<base's public name> (e.g. ...)``)."""
    for name, value in (("optimizer", optimizer), ("optimizer_rest", optimizer_rest)):
        if value is not None and not isinstance(value, base):
            raise TypeError(f"{name} must be a {example} or None, got {type(value).__module__}.{type(value).__name__}")


def gptq_config_with_defaults(n_epochs: int, optimizer: Any, optimizer_rest: Any, optimizer_bias: Any, loss: Any,
                              log_function: Any, use_hessian_based_weights: bool, regularization_factor: Optional[float],
                              hessian_batch_size: int, use_hessian_sample_attention: bool,
                              gradual_activation_quantization: Any) -> GradientPTQConfig:
    """The GradientPTQConfig that ``get_<framework>_gptq_config`` returns, once the framework has chosen
    (and checked) the optimizers: Hessian-based loss weights, per sample (sample-layer attention) by
    default; gradual activation quantization on by default; the regulariser factor of the chosen loss."""
    if use_hessian_sample_attention and not use_hessian_based_weights:
        raise ValueError("use_hessian_sample_attention=True needs use_hessian_based_weights=True "
                         "(sample-layer attention is a Hessian-based weighting)")
    if isinstance(gradual_activation_quantization, bool):
        gradual = GradualActivationQuantizationConfig() if gradual_activation_quantization else None
    elif isinstance(gradual_activation_quantization, GradualActivationQuantizationConfig):
        gradual = gradual_activation_quantization
    else:
        raise TypeError(f"gradual_activation_quantization must be a bool or a GradualActivationQuantizationConfig, "
                        f"got {type(gradual_activation_quantization).__name__}")
    hessian = None
    if use_hessian_based_weights:
        hessian = GPTQHessianScoresConfig(per_sample=use_hessian_sample_attention,
                                          hessians_num_samples=None if use_hessian_sample_attention else HESSIAN_NUM_SAMPLES,
                                          hessian_batch_size=hessian_batch_size)
    if regularization_factor is None:
        regularization_factor = REG_DEFAULT_SLA if use_hessian_sample_attention else REG_DEFAULT
    return GradientPTQConfig(
        n_epochs=n_epochs, loss=loss, optimizer=optimizer, optimizer_rest=optimizer_rest, train_bias=True,
        hessian_weights_config=hessian, gradual_activation_quantization_config=gradual,
        regularization_factor=regularization_factor, log_function=log_function, optimizer_bias=optimizer_bias)


def checked_gptq_quantizer_args(owner: str, quantization_parameter_learning: Any, max_lsbs_change: Any = 1.0) -> tuple:
    """A GPTQ weight quantizer's own arguments, checked (``owner``: its class name for the message)."""
    if not isinstance(quantization_parameter_learning, bool):
        raise InvalidConfigError(f"{owner}: quantization_parameter_learning must be a bool, "
                                 f"got {quantization_parameter_learning!r}")
    if not isinstance(max_lsbs_change, (int, float)) or isinstance(max_lsbs_change, bool) or max_lsbs_change <= 0:
        raise InvalidConfigError(f"{owner}: max_lsbs_change must be a number > 0, got {max_lsbs_change!r}")
    return quantization_parameter_learning, float(max_lsbs_change)
