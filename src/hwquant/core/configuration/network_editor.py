"""Network-editor rules: a node filter plus an action that edits the quantization configs of matched nodes.

Framework-free. A filter matches any node object with ``.name`` (str) and ``.type`` (the layer class or
function the node came from). Actions check their keyword names and values when built, so a typo fails at
once (naming the valid fields) instead of being silently ignored during quantization.
"""
from __future__ import annotations

import math
from collections import namedtuple
from typing import Any, Callable, ClassVar, Dict, Iterable, Optional, Union

from hwquant.constants import MAX_N_BITS, MIN_N_BITS
from hwquant.core.configuration.error_methods import QuantizationErrorMethod
from hwquant.core.configuration.validation import as_bool, as_enum, as_int, as_real
from hwquant.tpc.enums import QuantizationMethod, Signedness

__all__ = [
    "BaseNodeMatcher", "NodeAndMatcher", "NodeOrMatcher", "NodeNotMatcher", "NodeAnyMatcher",
    "NodeTypeFilter", "NodeNameFilter", "NodeNameScopeFilter", "EditRule", "BaseAction",
    "ChangeCandidatesActivationQuantConfigAttr", "ChangeFinalActivationQuantConfigAttr",
    "ChangeCandidatesWeightsQuantConfigAttr", "ChangeFinalWeightsQuantConfigAttr",
    "ChangeCandidatesActivationQuantizationMethod", "ChangeCandidatesWeightsQuantizationMethod",
    "ChangeFinalWeightsQuantizationMethod", "ChangeQuantizationParamFunction",
    "ACTIVATION_CONFIG_FIELDS", "WEIGHTS_ATTR_CONFIG_FIELDS", "WEIGHTS_NODE_CONFIG_FIELDS",
]


# ---- Filters ----
class BaseNodeMatcher:
    """A condition on a node. Combine with ``&``, ``|`` and ``~`` (or MCT's logic_and / logic_or /
    logic_not); ``apply`` is MCT's name of ``match``."""

    def match(self, node: Any) -> bool:
        raise NotImplementedError

    def apply(self, node: Any) -> bool:
        return self.match(node)

    @staticmethod
    def _other(other: Any, op: str) -> "BaseNodeMatcher":
        if not isinstance(other, BaseNodeMatcher):
            raise TypeError(f"'{op}' combines node filters only, got {other!r}")
        return other

    def __and__(self, other: Any) -> "NodeAndMatcher":
        return NodeAndMatcher(self, self._other(other, "&"))

    def __or__(self, other: Any) -> "NodeOrMatcher":
        return NodeOrMatcher(self, self._other(other, "|"))

    def __invert__(self) -> "NodeNotMatcher":
        return NodeNotMatcher(self)

    logic_and = __and__
    logic_or = __or__
    logic_not = __invert__

    def _key(self) -> tuple:
        return tuple(self.__dict__.items())

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        args = ", ".join(f"{v!r}" for v in self.__dict__.values())
        return f"{type(self).__name__}({args})"


class _PairMatcher(BaseNodeMatcher):
    symbol = "?"

    def __init__(self, matcher_a: BaseNodeMatcher, matcher_b: BaseNodeMatcher):
        self.matcher_a, self.matcher_b = matcher_a, matcher_b

    def __repr__(self) -> str:
        return f"({self.matcher_a!r} {self.symbol} {self.matcher_b!r})"


class NodeAndMatcher(_PairMatcher):
    symbol = "&"

    def match(self, node: Any) -> bool:
        return self.matcher_a.match(node) and self.matcher_b.match(node)


class NodeOrMatcher(_PairMatcher):
    symbol = "|"

    def match(self, node: Any) -> bool:
        return self.matcher_a.match(node) or self.matcher_b.match(node)


class NodeNotMatcher(BaseNodeMatcher):
    def __init__(self, matcher_a: BaseNodeMatcher):
        self.matcher_a = matcher_a

    def match(self, node: Any) -> bool:
        return not self.matcher_a.match(node)

    def __repr__(self) -> str:
        return f"~{self.matcher_a!r}"


class NodeAnyMatcher(BaseNodeMatcher):
    """Matches every node."""

    def match(self, node: Any) -> bool:
        return True


def _node_attr(node: Any, attr: str, filt: BaseNodeMatcher) -> Any:
    try:
        return getattr(node, attr)
    except AttributeError:
        raise TypeError(f"{type(filt).__name__} needs a node with a '.{attr}' attribute, got {node!r}") from None


class NodeTypeFilter(BaseNodeMatcher):
    """Matches nodes whose ``.type`` is exactly `node_type` (the layer class or function; no subclasses)."""

    def __init__(self, node_type: Any):
        if node_type is None:
            raise TypeError("NodeTypeFilter node_type must be a layer class or function, got None")
        self.node_type = node_type

    def match(self, node: Any) -> bool:
        return bool(_node_attr(node, "type", self) == self.node_type)


class NodeNameFilter(BaseNodeMatcher):
    """Matches the node whose ``.name`` equals `node_name`."""

    def __init__(self, node_name: str):
        if not isinstance(node_name, str) or not node_name:
            raise TypeError(f"NodeNameFilter node_name must be a non-empty str, got {node_name!r}")
        self.node_name = node_name

    def match(self, node: Any) -> bool:
        return _node_attr(node, "name", self) == self.node_name


class NodeNameScopeFilter(BaseNodeMatcher):
    """Matches nodes whose ``.name`` contains `node_name_scope`."""

    def __init__(self, node_name_scope: str):
        if not isinstance(node_name_scope, str) or not node_name_scope:
            raise TypeError(f"NodeNameScopeFilter node_name_scope must be a non-empty str (an empty scope would "
                            f"match every node; use NodeAnyMatcher() for that), got {node_name_scope!r}")
        self.node_name_scope = node_name_scope

    def match(self, node: Any) -> bool:
        return self.node_name_scope in _node_attr(node, "name", self)


# ---- Value checks of the editable fields ----
def _fail(name: str, value: Any, rule: str) -> None:
    raise ValueError(f"{name}={value!r} is invalid: {rule}")


def _checked(name: str, v: Any, convert: Callable[[Any], Any]) -> Any:
    try:
        return convert(v)
    except ValueError as e:
        _fail(name, v, str(e))


def _bool(name: str, v: Any) -> bool:
    return _checked(name, v, as_bool)


def _int(name: str, v: Any, low: int, high: float = math.inf) -> int:
    v = _checked(name, v, as_int)
    if not low <= v <= high:
        _fail(name, v, f"expected an int from {low}" + ("" if high == math.inf else f" to {high}"))
    return v


def _real(name: str, v: Any, positive: bool, upper: Optional[float] = None) -> float:
    v = _checked(name, v, as_real)
    if (v <= 0 if positive else v < 0) or (upper is not None and v > upper):
        _fail(name, v, f"expected a number {'> 0' if positive else '>= 0'}"
                       + (f" and <= {upper}" if upper is not None else ""))
    return v


def _enum(enum_cls: type) -> Callable[[str, Any], Any]:
    return lambda name, v: _checked(name, v, lambda x: as_enum(enum_cls, x))


def _dict(name: str, v: Any) -> dict:
    if not isinstance(v, dict):
        _fail(name, v, "expected a dict")
    return v


_BITS = lambda n, v: _int(n, v, MIN_N_BITS, MAX_N_BITS)  # noqa: E731
_QM = _enum(QuantizationMethod)
_QEM = _enum(QuantizationErrorMethod)

# Fields an action may edit, with their value checks.
ACTIVATION_CONFIG_FIELDS: Dict[str, Callable[[str, Any], Any]] = {
    "activation_quantization_method": _QM,
    "activation_n_bits": _BITS,
    "enable_activation_quantization": _bool,
    "quantization_preserving": _bool,
    "signedness": _enum(Signedness),
    "activation_error_method": _QEM,
    "relu_bound_to_power_of_2": _bool,
    "activation_channel_equalization": _bool,
    "input_scaling": _bool,
    "min_threshold": lambda n, v: _real(n, v, positive=True),
    "l_p_value": lambda n, v: _int(n, v, 1),
    "shift_negative_activation_correction": _bool,
    "z_threshold": lambda n, v: _real(n, v, positive=True),
    "shift_negative_ratio": lambda n, v: _real(n, v, positive=False, upper=1.0),
    "shift_negative_threshold_recalculation": _bool,
    "shift_negative_params_search": _bool,
    "concat_threshold_update": _bool,
    "activation_quantization_params": _dict,
}
# Per weight attribute (kernel, bias, ...).
WEIGHTS_ATTR_CONFIG_FIELDS: Dict[str, Callable[[str, Any], Any]] = {
    "weights_quantization_method": _QM,
    "weights_n_bits": _BITS,
    "weights_per_channel_threshold": _bool,
    "enable_weights_quantization": _bool,
    "weights_error_method": _QEM,
    "l_p_value": lambda n, v: _int(n, v, 1),
    "weights_channels_axis": lambda n, v: v,  # any value
    "lut_values_bitwidth": _BITS,
    "weights_quantization_params": _dict,
}
# Shared by all the weight attributes of a node (set on the weights config itself).
WEIGHTS_NODE_CONFIG_FIELDS: Dict[str, Callable[[str, Any], Any]] = {
    "min_threshold": lambda n, v: _real(n, v, positive=True),
    "simd_size": lambda n, v: _int(n, v, 1),
    "weights_second_moment_correction": _bool,
    "weights_bias_correction": _bool,
}


def _check_kwargs(action: str, kwargs: Dict[str, Any], fields: Dict[str, Callable]) -> Dict[str, Any]:
    if not kwargs:
        raise ValueError(f"{action} needs at least one field to change; valid fields: {', '.join(fields)}")
    unknown = [k for k in kwargs if k not in fields]
    if unknown:
        raise ValueError(f"{action} got unknown field(s) {', '.join(map(repr, unknown))}; "
                         f"valid fields: {', '.join(fields)}")
    return {k: fields[k](k, v) for k, v in kwargs.items()}


def _check_attr_name(attr_name: Any) -> Union[str, int, None]:
    if attr_name is None or (isinstance(attr_name, str) and attr_name) or \
            (isinstance(attr_name, int) and not isinstance(attr_name, bool) and attr_name >= 0):
        return attr_name
    raise ValueError(f"attr_name={attr_name!r} is invalid: expected a weight attribute name (non-empty str), "
                     f"the index of a positional weight (int >= 0), or None for all weight attributes")


# ---- Edit rules and actions ----
class EditRule(namedtuple("EditRule", "filter action")):
    """A node filter and the action to apply to the nodes it matches."""

    def __new__(cls, filter: BaseNodeMatcher, action: "BaseAction"):
        if not isinstance(filter, BaseNodeMatcher):
            raise TypeError(f"EditRule filter must be a node filter (NodeTypeFilter, NodeNameFilter, "
                            f"NodeNameScopeFilter or a combination), got {filter!r}")
        if not isinstance(action, BaseAction):
            raise TypeError(f"EditRule action must be a network-editor action (e.g. "
                            f"ChangeCandidatesWeightsQuantConfigAttr), got {action!r}")
        return super().__new__(cls, filter, action)

    def __repr__(self) -> str:
        return f"EditRule(filter={self.filter!r}, action={self.action!r})"


def _set(cfg: Any, name: str, value: Any) -> None:
    if not hasattr(cfg, name):
        raise AttributeError(f"{type(cfg).__name__} has no field '{name}' to edit")
    setattr(cfg, name, value)


def _weight_attr_configs(wcfg: Any, attr_name: Union[str, int, None]) -> list:
    """The attribute configs an edit targets: `attr_name`'s, or all of them when it is None."""
    names = wcfg.all_weight_attrs if attr_name is None else [attr_name]
    return [wcfg.get_attr_config(a) for a in names]


class BaseAction:
    """An edit of a node's quantization configs.

    Contract of ``apply(candidate_configs, final)``: `candidate_configs` is an iterable of objects with
    ``activation_quantization_cfg`` and ``weights_quantization_cfg`` attributes (a node's candidate
    configs, or a one-item list with its final config); either attribute may be None, and such a part is
    skipped. `final` tells which stage the pipeline is at: "Candidates" actions act only when final is
    False, "Final" actions only when final is True. Configs are edited in place with setattr (weights
    attribute configs come from ``weights_quantization_cfg.get_attr_config(name)``, or from every name in
    ``weights_quantization_cfg.all_weight_attrs`` when attr_name is None). Returns the number of configs
    edited. A config that lacks an edited field raises AttributeError.
    """

    final_stage: ClassVar[bool] = False

    def apply(self, candidate_configs: Iterable[Any], final: bool = False) -> int:
        if bool(final) != self.final_stage:
            return 0
        return sum(1 for cfg in candidate_configs if cfg is not None and self._edit(cfg))

    def _edit(self, cfg: Any) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if v is not None)
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:  # coarse but consistent with __eq__ (kwargs may hold unhashable values)
        return hash(type(self).__name__)


class ChangeCandidatesActivationQuantConfigAttr(BaseAction):
    """Set activation config fields (e.g. activation_n_bits=4) on every candidate config of the node."""

    def __init__(self, **kwargs: Any):
        self.kwargs = _check_kwargs(type(self).__name__, kwargs, ACTIVATION_CONFIG_FIELDS)

    def _edit(self, cfg: Any) -> bool:
        acfg = cfg.activation_quantization_cfg
        if acfg is None:
            return False
        for k, v in self.kwargs.items():
            _set(acfg, k, v)
        return True


class ChangeFinalActivationQuantConfigAttr(ChangeCandidatesActivationQuantConfigAttr):
    """Set activation config fields on the node's final config (after the bit-width selection)."""

    final_stage = True


class ChangeCandidatesWeightsQuantConfigAttr(BaseAction):
    """Set weights config fields on every candidate: per-attribute fields (weights_n_bits, ...) on
    `attr_name`'s config, or on all weight attributes when attr_name is None; node-wide fields
    (weights_bias_correction, ...) on the weights config itself."""

    def __init__(self, attr_name: Union[str, int, None] = None, **kwargs: Any):
        self.attr_name = _check_attr_name(attr_name)
        self.kwargs = _check_kwargs(type(self).__name__, kwargs,
                                    {**WEIGHTS_ATTR_CONFIG_FIELDS, **WEIGHTS_NODE_CONFIG_FIELDS})

    def _edit(self, cfg: Any) -> bool:
        wcfg = cfg.weights_quantization_cfg
        if wcfg is None:
            return False
        attr_cfgs = None
        for k, v in self.kwargs.items():
            if k in WEIGHTS_ATTR_CONFIG_FIELDS:
                attr_cfgs = _weight_attr_configs(wcfg, self.attr_name) if attr_cfgs is None else attr_cfgs
                for acfg in attr_cfgs:
                    _set(acfg, k, v)
            else:
                _set(wcfg, k, v)
        return True


class ChangeFinalWeightsQuantConfigAttr(ChangeCandidatesWeightsQuantConfigAttr):
    """As ChangeCandidatesWeightsQuantConfigAttr, on the node's final config."""

    final_stage = True


class ChangeCandidatesActivationQuantizationMethod(ChangeCandidatesActivationQuantConfigAttr):
    """Switch the activation quantization method of every candidate. The config is expected to refresh
    what derives from the method (quantizer and parameter functions) when the method is assigned."""

    def __init__(self, activation_quantization_method: Any):
        super().__init__(activation_quantization_method=activation_quantization_method)
        self.activation_quantization_method = self.kwargs["activation_quantization_method"]


class ChangeCandidatesWeightsQuantizationMethod(ChangeCandidatesWeightsQuantConfigAttr):
    """Switch the weights quantization method of every candidate (one attribute, or all when
    attr_name is None). MCT's argument order: the attribute first."""

    def __init__(self, attr_name: Union[str, int, None] = None, weights_quantization_method: Any = None):
        if isinstance(attr_name, QuantizationMethod) or weights_quantization_method is None:
            # an IntEnum would pass for a positional-weight index: say what the order is
            raise ValueError(f"{type(self).__name__}(attr_name={attr_name!r}, weights_quantization_method="
                             f"{weights_quantization_method!r}): the weight attribute comes first and the "
                             "weights_quantization_method must be given, e.g. "
                             f"{type(self).__name__}('kernel', QuantizationMethod.SYMMETRIC)")
        super().__init__(attr_name=attr_name, weights_quantization_method=weights_quantization_method)
        self.weights_quantization_method = self.kwargs["weights_quantization_method"]


class ChangeFinalWeightsQuantizationMethod(ChangeCandidatesWeightsQuantizationMethod):
    """Switch the weights quantization method of the node's final config."""

    final_stage = True


class ChangeQuantizationParamFunction(BaseAction):
    """Replace the function that computes quantization parameters (thresholds, ranges) of the candidates'
    activations and / or weights (one weight attribute, or all when attr_name is None)."""

    def __init__(self, attr_name: Union[str, int, None] = None,
                 activation_quantization_params_fn: Optional[Callable] = None,
                 weights_quantization_params_fn: Optional[Callable] = None):
        for name, fn in (("activation_quantization_params_fn", activation_quantization_params_fn),
                         ("weights_quantization_params_fn", weights_quantization_params_fn)):
            if fn is not None and not callable(fn):
                _fail(name, fn, "expected a callable or None")
        if activation_quantization_params_fn is None and weights_quantization_params_fn is None:
            raise ValueError("ChangeQuantizationParamFunction needs activation_quantization_params_fn and/or "
                             "weights_quantization_params_fn")
        self.attr_name = _check_attr_name(attr_name)
        self.activation_quantization_params_fn = activation_quantization_params_fn
        self.weights_quantization_params_fn = weights_quantization_params_fn

    def _edit(self, cfg: Any) -> bool:
        edited = False
        acfg, wcfg = cfg.activation_quantization_cfg, cfg.weights_quantization_cfg
        if self.activation_quantization_params_fn is not None and acfg is not None:
            _set(acfg, "activation_quantization_params_fn", self.activation_quantization_params_fn)
            edited = True
        if self.weights_quantization_params_fn is not None and wcfg is not None:
            for attr_cfg in _weight_attr_configs(wcfg, self.attr_name):
                _set(attr_cfg, "weights_quantization_params_fn", self.weights_quantization_params_fn)
            edited = True
        return edited
