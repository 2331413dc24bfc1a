"""Framework-free pieces of the trainable-quantizer infrastructure: what a quantizer trains
(QuantizationTarget), how (TrainingMethod), which of its variables belong together (VariableGroup),
and the registry that finds the quantizer class for (target, quantization method, training method).

Quantizer classes register themselves with :func:`mark_quantizer`; the QAT and GPTQ builders ask
:func:`get_trainable_quantizer_class`, whose error lists what is available.
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Dict, Iterable, List, Optional, Tuple, cast

from hwquant.errors import InvalidConfigError
from hwquant.tpc.enums import QuantizationMethod

__all__ = ["TrainingMethod", "QuantizationTarget", "VariableGroup", "mark_quantizer",
           "get_trainable_quantizer_class", "registered_quantizers"]


class TrainingMethod(Enum):
    """How a trainable quantizer learns.

    STE: rounding passed straight through (its gradient is 1); a value clipped by the grid gets no
    gradient, and a learned threshold / range learns from the clipped values only.
    DQA: DNN quantization with attention (in the API; no hwquant quantizer implements it yet).
    LSQ: learned step size (Esser et al. 2020): the step size also learns from the rounding error,
    its gradient scaled by 1 / sqrt(N * Q_max).
    """
    STE = "STE"
    DQA = "DQA"
    LSQ = "LSQ"


class QuantizationTarget(Enum):
    Activation = "Activation"
    Weights = "Weights"


class VariableGroup(Enum):
    """The two kinds of trainable variables of a quantizer (an optimizer may treat them apart)."""
    WEIGHTS = 0
    QPARAMS = 1


_Key = Tuple[QuantizationTarget, QuantizationMethod, Enum]  # Enum: a TrainingMethod, or GPTQ's RoundingType
_REGISTRY: Dict[_Key, List[type]] = {}


def _as_member(enum_cls, value, what: str):
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, tuple) and len(value) == 1:  # MCT's TrainingMethod values are 1-tuples ("STE",)
        value = value[0]
    for m in enum_cls:
        if value in (m.value, m.name) or getattr(value, "name", None) == m.name:
            return m
    raise InvalidConfigError(f"{what} must be one of {[m.name for m in enum_cls]}, got {value!r}")


def _identifier(value: Any, what: str) -> Enum:
    """A quantizer identifier: any Enum member as it is (GPTQ registers its RoundingType), else a
    TrainingMethod by value or name."""
    return value if isinstance(value, Enum) and not isinstance(value, TrainingMethod) else \
        _as_member(TrainingMethod, value, what)


def mark_quantizer(quantization_target: QuantizationTarget, quantization_method: Iterable[QuantizationMethod],
                   identifier: Enum):
    """Class decorator: register a trainable quantizer for ``quantization_target`` under each of the
    quantization methods and the identifier (a TrainingMethod for QAT, a RoundingType for GPTQ). The
    class gets the attributes ``quantization_target``, ``quantization_method`` (a list) and ``identifier``."""
    target = _as_member(QuantizationTarget, quantization_target, "quantization_target")
    methods = [_as_member(QuantizationMethod, m, "quantization_method") for m in quantization_method]
    training = _identifier(identifier, "identifier")
    if not methods:
        raise InvalidConfigError("mark_quantizer needs at least one quantization_method")

    def register(cls: type) -> type:
        for m in methods:
            classes = _REGISTRY.setdefault((target, m, training), [])
            clash = [c for c in classes if _name(c) != _name(cls) and _framework(c) == _framework(cls)]
            if clash:
                raise InvalidConfigError(f"{cls.__name__}: a {target.name} quantizer for ({m.name}, {training.name}) "
                                         f"is already registered ({clash[0].__name__})")
            classes[:] = [c for c in classes if _name(c) != _name(cls)] + [cls]  # a reloaded module replaces
        marked = cast(Any, cls)  # the attributes this decorator adds
        marked.quantization_target, marked.quantization_method, marked.identifier = target, methods, training
        return cls
    return register


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _framework(cls: type) -> Optional[str]:
    """The framework a quantizer class is written for (its base class sets ``framework``)."""
    return getattr(cls, "framework", None)


def get_trainable_quantizer_class(quant_target: QuantizationTarget, quantizer_id: Enum,
                                  quant_method: QuantizationMethod, quantizer_base_class: type) -> type:
    """The registered subclass of ``quantizer_base_class`` for (target, identifier: a training method or
    a GPTQ rounding type, quantization method); an InvalidConfigError naming what is registered otherwise."""
    target = _as_member(QuantizationTarget, quant_target, "quantization target")
    training = _identifier(quantizer_id, "training method")
    method = _as_member(QuantizationMethod, quant_method, "quantization method")
    found = [c for c in _REGISTRY.get((target, method, training), []) if issubclass(c, quantizer_base_class)]
    if len(found) == 1:
        return found[0]
    if found:
        raise InvalidConfigError(f"several {target.name} quantizers registered for ({method.name}, {training.name}): "
                                 f"{[c.__name__ for c in found]}")
    available = sorted(f"({m.name}, {t.name})" for (tg, m, t), classes in _REGISTRY.items()
                       if tg == target and any(issubclass(c, quantizer_base_class) for c in classes))
    raise InvalidConfigError(f"no trainable {target.name.lower()} quantizer for quantization method {method.name} with "
                             f"training method {training.name}; available (method, training): {', '.join(available)}. "
                             f"Choose another training method (QATConfig) or rounding type (GradientPTQConfig), or a TPC whose "
                             f"quantization method has one")


def quantizer_params_override(v: Any) -> Dict[str, Any]:
    """A QAT / GPTQ ``*_quantizer_params_override``: None -> {}, else a dict of constructor arguments by
    name (checked against the quantizer's constructor when the model is built)."""
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise ValueError(f"must be None or a dict of quantizer constructor arguments by name, got {v!r}")
    return dict(v)


def registered_quantizers() -> Dict[_Key, List[type]]:
    """A copy of the registry (for listing what is available)."""
    return {k: list(v) for k, v in _REGISTRY.items()}


def no_trainable_quantizers(quantized: bool, method: Optional[str], framework: str) -> str:
    """Why a model without trainable quantizers cannot be finalized: ``quantized`` (it has quantizers),
    ``method`` (of its metadata), ``framework`` ("keras" / "pytorch") naming its QAT init."""
    init = f"mct.qat.{framework}_quantization_aware_training_init_experimental (after training)"
    if not quantized:
        return f"the model has no trainable quantizers (it is not quantized): pass the model returned by {init}"
    if method == "qat":
        return ("the model is already finalized: its quantizers are the fixed, inferable ones. Use it as it is, "
                "or finalize the QAT model it came from again (finalize leaves that model unchanged)")
    return ("the model is already an inferable quantized model (its quantizers are fixed, as post-training "
            f"quantization returns them) and has no trainable quantizers: pass the model returned by {init}")
