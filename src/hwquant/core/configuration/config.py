"""User-facing configuration objects of the core (MCT 2.6 API), validated when built and when assigned.

Every config refuses bad input at once with an error naming the field, the bad value and the rule, so a
mistake surfaces where it is made rather than deep inside the quantization pipeline. Framework-free.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Annotated, Any, Callable, ClassVar, Dict, List, Optional, Set, Tuple, Union, cast

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PrivateAttr, field_validator, model_validator

from hwquant.constants import MAX_N_BITS, MIN_N_BITS, MIN_THRESHOLD
from hwquant.core.configuration.error_methods import QuantizationErrorMethod, ThresholdSelectionMethod  # noqa: F401 (re-exported)
from hwquant.core.configuration.network_editor import BaseNodeMatcher, EditRule
from hwquant.core.configuration.validation import as_bool, as_enum, as_int, as_real
from hwquant.tpc.enums import QuantizationMethod
from hwquant.tpc.schema import bind_positional

__all__ = [
    "QuantizationErrorMethod", "ThresholdSelectionMethod", "QuantizationConfig", "MpDistanceWeighting",
    "MpMetricNormalization", "MixedPrecisionQuantizationConfig", "RUTarget", "ResourceUtilization",
    "ManualBitWidthSelection", "ManualWeightsBitWidthSelection", "BitWidthConfig", "DebugConfig",
    "CoreConfig", "UserInformation", "DefaultDict",
]


# ---- Reusable field types ----
# Pydantic's lax mode would turn "8", 8.0 or "yes" into valid values; configs here refuse such look-alikes
# because they usually hide a mistake (a wrong argument order, a wrong enum).
def _rule(pred: Callable[[Any], bool], text: str) -> AfterValidator:
    """An after-validator that checks `pred` and otherwise says `text` and the value."""
    def check(v):
        if not pred(v):
            raise ValueError(f"{text}, got {v!r}")
        return v
    return AfterValidator(check)


def enum_coercer(enum_cls: type) -> BeforeValidator:
    """A pydantic before-validator accepting a member of `enum_cls` or its value (see as_enum)."""
    return BeforeValidator(lambda v: as_enum(enum_cls, v))


Flag = Annotated[bool, BeforeValidator(as_bool)]
NBits = Annotated[int, BeforeValidator(as_int),
                  _rule(lambda v: MIN_N_BITS <= v <= MAX_N_BITS, f"must be from {MIN_N_BITS} to {MAX_N_BITS} bits")]
PositiveFinite = Annotated[float, BeforeValidator(as_real), _rule(lambda v: 0 < v < math.inf, "must be > 0 and finite")]
NonNegative = Annotated[float, BeforeValidator(as_real), _rule(lambda v: v >= 0, "must be >= 0 (inf = unlimited)")]
NonNegativeFinite = Annotated[float, BeforeValidator(as_real),
                              _rule(lambda v: 0 <= v < math.inf, "must be >= 0 and finite")]
AtLeastOne = Annotated[int, BeforeValidator(as_int), _rule(lambda v: v >= 1, "must be >= 1")]
QMethod = Annotated[QuantizationMethod, enum_coercer(QuantizationMethod)]


def _check_callable(v: Any) -> Any:
    if v is not None and not callable(v):
        raise ValueError(f"expected a callable (function) or None, got {v!r}")
    return v


OptCallable = Annotated[Optional[Any], AfterValidator(_check_callable)]


class ValidatedConfig(BaseModel):
    """Base of the pydantic configs: mutable, validated on assignment, unknown names refused, and
    positional arguments accepted in the documented order (MCT's dataclasses allow them).

    MCT's configs are dataclasses and user code edits them with `dataclasses.replace(cfg, n_epochs=3)`
    (also `dataclasses.fields` / `asdict`): each config class carries the dataclass field table of its
    fields, so those functions work and `replace` re-validates through the constructor."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid", arbitrary_types_allowed=True)
    _positional: ClassVar[Optional[Tuple[str, ...]]] = None  # None: every field, in declaration order
    _aliases: ClassVar[Dict[str, str]] = {}  # older spelling -> field

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        # The field table of a plain dataclass with the same field names (built by the dataclasses
        # module itself, so its Field objects are complete).
        shadow = dataclasses.make_dataclass(cls.__name__, [(n, Any, field(default=None)) for n in cls.model_fields])
        cast(Any, cls).__dataclass_fields__ = cast(Any, shadow).__dataclass_fields__

    def __init__(self, *args: Any, **kwargs: Any):
        cls = type(self)
        bind_positional(cls.__name__, cls._positional if cls._positional is not None else tuple(cls.model_fields),
                        args, kwargs)
        known = list(cls.model_fields) + list(cls._aliases)
        for name in kwargs:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise TypeError(f"{cls.__name__} got an unexpected argument '{name}'{hint} "
                                f"Valid names: {', '.join(known)}")
        super().__init__(**kwargs)


# ---- Quantization ----
_QEM = Annotated[QuantizationErrorMethod, enum_coercer(QuantizationErrorMethod)]

# Older (seed) keyword -> MCT 2.6 field.
_QC_ALIASES = {
    "activation_threshold_method": "activation_error_method",
    "weights_threshold_method": "weights_error_method",
    "relu_unbound_correction": "relu_bound_to_power_of_2",
}
# Seed-only fields that override what the target platform says when given (not None).
_TPC_OVERRIDES = ("activation_quantization_method", "weights_quantization_method", "activation_n_bits",
                  "weights_n_bits", "weights_per_channel_threshold", "enable_weights_quantization",
                  "enable_activation_quantization")


def _alias(name: str) -> property:
    """Another attribute name of the field `name`, read and assigned through it (validated)."""
    return property(lambda self: getattr(self, name), lambda self, v: setattr(self, name, v))


class QuantizationConfig(ValidatedConfig):
    """Parameters of the quantization process (MCT 2.6 fields and defaults).

    Also accepts the seed's spellings of three fields (_QC_ALIASES; attributes too), giving both names with
    different values being an error, and the seed-only fields of _TPC_OVERRIDES, which default to None
    ("take it from the TPC") and, when given, override the TPC (see :meth:`tpc_overrides`).
    """

    activation_error_method: _QEM = QuantizationErrorMethod.MSE
    weights_error_method: _QEM = QuantizationErrorMethod.MSE
    relu_bound_to_power_of_2: Flag = False
    weights_bias_correction: Flag = True
    weights_second_moment_correction: Flag = False
    input_scaling: Flag = False
    softmax_shift: Flag = False
    shift_negative_activation_correction: Flag = True
    activation_channel_equalization: Flag = False
    z_threshold: Annotated[float, BeforeValidator(as_real),
                           _rule(lambda v: v > 0, "must be > 0 (inf disables outlier removal)")] = math.inf
    min_threshold: PositiveFinite = MIN_THRESHOLD
    l_p_value: AtLeastOne = 2
    linear_collapsing: Flag = True
    residual_collapsing: Flag = True
    shift_negative_ratio: Annotated[float, BeforeValidator(as_real),
                                    _rule(lambda v: 0 <= v <= 1, "must be from 0 to 1")] = 0.05
    shift_negative_threshold_recalculation: Flag = False
    shift_negative_params_search: Flag = False
    concat_threshold_update: Flag = False
    activation_bias_correction: Flag = False
    activation_bias_correction_threshold: NonNegativeFinite = 0.0
    custom_tpc_opset_to_layer: Optional[Any] = None
    # hwquant's own: how the model's output tensors choose their range. Clipping an output's largest
    # values changes the decisions taken on it (argmax, scores), which an MSE on the tensor does not
    # weigh; None: like every other activation (activation_error_method).
    output_activation_error_method: Optional[_QEM] = QuantizationErrorMethod.NOCLIPPING
    # hwquant's own: True gives the weight matrices of layers no operator set of the TPC lists (LSTM / GRU
    # kernels, embedding tables) the TPC's fully-connected kernel config, since they are products like it.
    # Off by default, as the TPC says nothing of them: per-row 8-bit grids cost Resemblyzer's LSTM 20 dB of
    # output SQNR (its first layer's input columns, mel power bins, differ in scale by orders of magnitude,
    # and so do its weights). Either way, the run lists those layers as left float or quantized.
    quantize_recurrent_and_embedding_weights: Flag = False
    # Seed-only TPC overrides (None: take it from the TPC).
    activation_quantization_method: Optional[QMethod] = None
    weights_quantization_method: Optional[QMethod] = None
    activation_n_bits: Optional[NBits] = None
    weights_n_bits: Optional[NBits] = None
    weights_per_channel_threshold: Optional[Flag] = None
    enable_weights_quantization: Optional[Flag] = None
    enable_activation_quantization: Optional[Flag] = None

    _aliases: ClassVar[Dict[str, str]] = _QC_ALIASES
    # Only MCT's own fields may be given by position (the overrides are keyword-only).
    _positional: ClassVar[Tuple[str, ...]] = (
        "activation_error_method", "weights_error_method", "relu_bound_to_power_of_2", "weights_bias_correction",
        "weights_second_moment_correction", "input_scaling", "softmax_shift", "shift_negative_activation_correction",
        "activation_channel_equalization", "z_threshold", "min_threshold", "l_p_value", "linear_collapsing",
        "residual_collapsing", "shift_negative_ratio", "shift_negative_threshold_recalculation",
        "shift_negative_params_search", "concat_threshold_update", "activation_bias_correction",
        "activation_bias_correction_threshold", "custom_tpc_opset_to_layer")

    @model_validator(mode="before")
    @classmethod
    def _map_old_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in _QC_ALIASES.items():
            if old not in data:
                continue
            value = data.pop(old)
            if new in data and data[new] != value:
                raise ValueError(f"'{old}' is another name of '{new}', and they were given different values "
                                 f"({old}={value!r}, {new}={data[new]!r}); give only one of them")
            data[new] = value
        return data

    @field_validator("custom_tpc_opset_to_layer")
    @classmethod
    def _check_custom_opsets(cls, v: Any) -> Any:
        if v is None:
            return v
        rule = ("must be None or a dict from an operator-set name (str) to a tuple "
                "(list_of_layers, optional_attr_mapping_dict)")
        if not isinstance(v, dict):
            raise ValueError(f"{rule}, got {type(v).__name__}")
        for name, entry in v.items():
            if not isinstance(name, str):
                raise ValueError(f"{rule}; key {name!r} is not a str")
            if not isinstance(entry, tuple) or len(entry) not in (1, 2):
                raise ValueError(f"{rule}; entry for {name!r} is {entry!r}")
            if not isinstance(entry[0], (list, tuple)) or len(entry[0]) == 0:
                raise ValueError(f"{rule}; the layers of {name!r} must be a non-empty list, got {entry[0]!r}")
            if len(entry) == 2 and entry[1] is not None and not isinstance(entry[1], dict):
                raise ValueError(f"{rule}; the attribute mapping of {name!r} must be a dict or None, "
                                 f"got {entry[1]!r}")
        return v

    # Older attribute names (read and write).
    activation_threshold_method = _alias("activation_error_method")
    weights_threshold_method = _alias("weights_error_method")
    relu_unbound_correction = _alias("relu_bound_to_power_of_2")

    def tpc_overrides(self) -> Dict[str, Any]:
        """The seed-only fields that were given (not None): they replace the TPC's values."""
        return {k: getattr(self, k) for k in _TPC_OVERRIDES if getattr(self, k) is not None}


# ---- Mixed precision ----
class MpDistanceWeighting(Enum):
    """How the distances at the interest points are combined into one sensitivity figure.

    AVG: mean over interest points; LAST_LAYER: the last interest point only; EXP: weights from the
    exponent of the negative distances; HESSIAN: weights from Hessian scores.
    """

    AVG = auto()
    LAST_LAYER = auto()
    EXP = auto()
    HESSIAN = auto()


class MpMetricNormalization(Enum):
    """Normalization of a layer's candidates' sensitivity: by its max-bit candidate, its min-bit
    candidate, or none."""

    MAXBIT = "MAXBIT"
    MINBIT = "MINBIT"
    NONE = "NONE"


class MixedPrecisionQuantizationConfig(ValidatedConfig):
    """Parameters of the mixed-precision bit-width search (MCT 2.6 fields and defaults).

    ``distance_weighting_method`` None resolves to HESSIAN when ``use_hessian_based_scores`` is set
    (any other method then is a contradiction), to AVG otherwise, and stays None when a
    ``custom_metric_fn`` replaces the interest-point metric.
    """

    compute_distance_fn: OptCallable = None
    distance_weighting_method: Optional[Annotated[MpDistanceWeighting, enum_coercer(MpDistanceWeighting)]] = None
    num_of_images: AtLeastOne = 32
    configuration_overwrite: Optional[List[Annotated[int, BeforeValidator(as_int),
                                                     _rule(lambda v: v >= 0, "must be >= 0")]]] = None
    num_interest_points_factor: Annotated[float, BeforeValidator(as_real),
                                          _rule(lambda v: 0 < v <= 1,
                                                "is a fraction of the interest points: must be > 0 and <= 1")] = 1.0
    use_hessian_based_scores: Flag = False
    norm_scores: Flag = True
    refine_mp_solution: Flag = True
    metric_normalization_threshold: Annotated[float, BeforeValidator(as_real),
                                              _rule(lambda v: v > 0, "must be > 0")] = 1e10
    hessian_batch_size: AtLeastOne = 32
    metric_normalization: Annotated[MpMetricNormalization,
                                    enum_coercer(MpMetricNormalization)] = MpMetricNormalization.NONE
    metric_epsilon: Optional[NonNegativeFinite] = 1e-6
    exp_distance_weighting_sigma: PositiveFinite = 0.1
    custom_metric_fn: OptCallable = None

    _is_mixed_precision_enabled: bool = PrivateAttr(default=False)

    @field_validator("configuration_overwrite", mode="before")
    @classmethod
    def _list_of_ints(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, (list, tuple)):
            raise ValueError(f"must be None or a list of candidate indices (ints >= 0), got {v!r}")
        return None if v is None else list(v)

    @model_validator(mode="before")
    @classmethod
    def _resolve_distance_weighting(cls, data: Any) -> Any:
        # Runs on assignment too (with all fields), so the rule holds whichever field changes.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        method, hessian = data.get("distance_weighting_method"), data.get("use_hessian_based_scores", False)
        if method is not None and not isinstance(method, MpDistanceWeighting):
            if isinstance(method, (Enum, bool)):
                return data  # the field validator refuses it
            try:
                method = MpDistanceWeighting(method)
            except (ValueError, TypeError):
                return data  # the field validator reports it
        if hessian is True or (type(hessian).__name__ == "bool_" and bool(hessian)):
            if method is not None and method != MpDistanceWeighting.HESSIAN:
                raise ValueError(f"distance_weighting_method={method!r} contradicts use_hessian_based_scores=True "
                                 f"(which means MpDistanceWeighting.HESSIAN); set one of them only")
            data["distance_weighting_method"] = MpDistanceWeighting.HESSIAN
        elif method is None and data.get("custom_metric_fn") is None:
            data["distance_weighting_method"] = MpDistanceWeighting.AVG
        return data

    def set_mixed_precision_enable(self) -> None:
        """Mark mixed precision as requested (the facades do so when a target resource utilization is set)."""
        self._is_mixed_precision_enabled = True

    @property
    def is_mixed_precision_enabled(self) -> bool:
        return self._is_mixed_precision_enabled


class RUTarget(Enum):
    """The resources a mixed-precision search can be limited on."""

    WEIGHTS = "weights"
    ACTIVATION = "activation"
    TOTAL = "total"
    BOPS = "bops"


# the ResourceUtilization field of each target
RU_FIELDS = {RUTarget.WEIGHTS: "weights_memory", RUTarget.ACTIVATION: "activation_memory",
             RUTarget.TOTAL: "total_memory", RUTarget.BOPS: "bops"}


class ResourceUtilization(ValidatedConfig):
    """Resource targets (or measured figures): weights / activation / total memory in bytes and
    bit-operations. ``inf`` means unrestricted; values must be >= 0 and not NaN."""

    weights_memory: NonNegative = math.inf
    activation_memory: NonNegative = math.inf
    total_memory: NonNegative = math.inf
    bops: NonNegative = math.inf

    def get_resource_utilization_dict(self, restricted_only: bool = False) -> Dict[RUTarget, float]:
        d = {target: getattr(self, name) for target, name in RU_FIELDS.items()}
        return {k: v for k, v in d.items() if v < math.inf} if restricted_only else d

    def get_restricted_targets(self) -> Set[RUTarget]:
        """The targets with a finite limit."""
        return set(self.get_resource_utilization_dict(restricted_only=True))

    def is_any_restricted(self) -> bool:
        return bool(self.get_restricted_targets())

    def weight_restricted(self) -> bool:
        return self.weights_memory < math.inf

    def activation_restricted(self) -> bool:
        return self.activation_memory < math.inf

    def total_mem_restricted(self) -> bool:
        return self.total_memory < math.inf

    def bops_restricted(self) -> bool:
        return self.bops < math.inf

    def is_satisfied_by(self, ru: "ResourceUtilization") -> bool:
        """Whether every figure of `ru` is within this object's targets."""
        if not isinstance(ru, ResourceUtilization):
            raise TypeError(f"is_satisfied_by expects a ResourceUtilization, got {type(ru).__name__}")
        mine, theirs = self.get_resource_utilization_dict(), ru.get_resource_utilization_dict()
        return all(theirs[t] <= mine[t] for t in RUTarget)

    def get_summary_str(self, restricted: bool) -> str:
        d = self.get_resource_utilization_dict(restricted_only=restricted)
        names = {RUTarget.WEIGHTS: "Weights memory", RUTarget.ACTIVATION: "Activation memory",
                 RUTarget.TOTAL: "Total memory", RUTarget.BOPS: "BOPS"}
        return ", ".join(f"{names[k]}: {v:g}" for k, v in d.items())

    def __repr__(self) -> str:
        return (f"ResourceUtilization(weights_memory={self.weights_memory:g}, activation_memory="
                f"{self.activation_memory:g}, total_memory={self.total_memory:g}, bops={self.bops:g})")

    __str__ = __repr__


# ---- Manual bit widths ----
def _check_bit_width(bit_width: Any, what: str = "bit_width") -> int:
    # 32 ("float") is refused on purpose: keeping a layer unquantized is a network-editor action
    # (enable_*_quantization=False), not a bit width, and a manual width must match a TPC candidate.
    if not isinstance(bit_width, numbers.Integral) or isinstance(bit_width, bool):
        raise ValueError(f"{what} must be an int from {MIN_N_BITS} to {MAX_N_BITS}, got {bit_width!r}")
    if not MIN_N_BITS <= int(bit_width) <= MAX_N_BITS:
        raise ValueError(f"{what} must be from {MIN_N_BITS} to {MAX_N_BITS}, got {bit_width!r} (to keep a layer "
                         f"in float, use a network-editor rule with enable_*_quantization=False)")
    return int(bit_width)


def _check_filter(f: Any) -> Any:
    if not isinstance(f, BaseNodeMatcher):
        raise TypeError(f"filter must be a node filter (NodeTypeFilter, NodeNameFilter, NodeNameScopeFilter or "
                        f"a combination of them), got {f!r}")
    return f


@dataclass
class ManualBitWidthSelection:
    """Activation bit width forced on the nodes a filter matches."""

    filter: BaseNodeMatcher
    bit_width: int

    def __post_init__(self):
        _check_filter(self.filter)
        self.bit_width = _check_bit_width(self.bit_width)


@dataclass
class ManualWeightsBitWidthSelection(ManualBitWidthSelection):
    """Weights bit width forced on one attribute (name, or index of a positional weight) of the matched nodes."""

    attr: Union[str, int] = None  # type: ignore[assignment]  # required: None only reaches __post_init__'s error

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.attr, bool) or not isinstance(self.attr, (str, int)) or self.attr == "" \
                or (isinstance(self.attr, int) and self.attr < 0):
            raise ValueError(f"attr must be a weight attribute name (non-empty str, e.g. KERNEL_ATTR) or the index "
                             f"(int >= 0) of a positional weight, got {self.attr!r}")


def _broadcast(filters: list, values: Any, what: str) -> list:
    """A single value (or a one-element list) applies to every filter; otherwise one value per filter."""
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    if len(values) == 1:
        return values * len(filters)
    if len(values) != len(filters):
        raise ValueError(f"got {len(values)} {what} for {len(filters)} filters: give one value for all filters "
                         f"or exactly one per filter")
    return values


@dataclass
class BitWidthConfig:
    """Manual bit-width selections, applied to the matched nodes before (and instead of) any search."""

    manual_activation_bit_width_selection_list: List[ManualBitWidthSelection] = field(default_factory=list)
    manual_weights_bit_width_selection_list: List[ManualWeightsBitWidthSelection] = field(default_factory=list)

    @staticmethod
    def _filters(filters: Any) -> list:
        if filters is None:
            raise ValueError("filters must be a node filter or a list of node filters, got None")
        filters = list(filters) if isinstance(filters, (list, tuple)) else [filters]
        if not filters:
            raise ValueError("filters is an empty list: give at least one node filter")
        return [_check_filter(f) for f in filters]

    def set_manual_activation_bit_width(self, filters: Any, bit_widths: Any) -> None:
        filters = self._filters(filters)
        bits = _broadcast(filters, bit_widths, "bit_widths")
        new = [ManualBitWidthSelection(f, b) for f, b in zip(filters, bits)]  # all validated before any is added
        self.manual_activation_bit_width_selection_list += new

    def set_manual_weights_bit_width(self, filters: Any, bit_widths: Any, attrs: Any) -> None:
        filters = self._filters(filters)
        bits = _broadcast(filters, bit_widths, "bit_widths")
        attrs = _broadcast(filters, attrs, "attrs")
        new = [ManualWeightsBitWidthSelection(f, b, a) for f, b, a in zip(filters, bits, attrs)]
        self.manual_weights_bit_width_selection_list += new


# ---- Debug / core / user information ----
class DebugConfig(ValidatedConfig):
    """Debugging and editing switches: similarity analysis, network-editor rules, scheduler simulation,
    and `bypass` (skip quantization entirely and return the float model, to isolate pipeline issues)."""

    analyze_similarity: Flag = False
    network_editor: List[Any] = []
    simulate_scheduler: Flag = False
    bypass: Flag = False

    @field_validator("network_editor", mode="before")
    @classmethod
    def _edit_rules(cls, v: Any) -> Any:
        if v is None:
            return []
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"must be a list of EditRule, got {type(v).__name__}")
        for i, rule in enumerate(v):
            if not isinstance(rule, EditRule):
                raise ValueError(f"item {i} must be an EditRule(filter, action), got {rule!r}")
        return list(v)


class CoreConfig(ValidatedConfig):
    """The core's configs together; any left None gets its default. Mixed precision counts as enabled
    when a mixed_precision_config was given explicitly (or flagged by set_mixed_precision_enable())."""

    model_config = ConfigDict(validate_default=True)  # so the None defaults become default configs

    # None (the default) becomes the default config in _default_when_none: the fields are never None
    quantization_config: QuantizationConfig = None  # type: ignore[assignment]
    mixed_precision_config: MixedPrecisionQuantizationConfig = None  # type: ignore[assignment]
    bit_width_config: BitWidthConfig = None  # type: ignore[assignment]
    debug_config: DebugConfig = None  # type: ignore[assignment]

    _mp_given: bool = PrivateAttr(default=False)

    @field_validator("quantization_config", "mixed_precision_config", "bit_width_config", "debug_config", mode="before")
    @classmethod
    def _default_when_none(cls, v: Any, info: Any) -> Any:
        expected = cast(type, cls.model_fields[info.field_name].annotation)
        if v is None:
            return expected()
        if not isinstance(v, expected):
            raise ValueError(f"expected a {expected.__name__} or None, got {type(v).__name__}")
        return v

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        mp_pos = 1  # position of mixed_precision_config
        self._mp_given = kwargs.get("mixed_precision_config") is not None or \
            (len(args) > mp_pos and args[mp_pos] is not None)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "mixed_precision_config":
            self._mp_given = value is not None

    @property
    def is_mixed_precision_enabled(self) -> bool:
        return self._mp_given or self.mixed_precision_config.is_mixed_precision_enabled


@dataclass
class UserInformation:
    """What a quantization run reports back to the user next to the quantized model."""

    input_scale: Union[float, Dict[str, float]] = 1  # one model input: its factor; several: per input
    gptq_info_dict: dict = field(default_factory=dict)
    mixed_precision_cfg: Optional[List[int]] = None
    final_resource_utilization: Optional[ResourceUtilization] = None
    # hwquant's own: {node name: (activation bits, {weight attribute: bits})} of the mixed-precision choice
    mixed_precision_bit_widths: Optional[Dict[str, Any]] = None
    # hwquant's own: {layer name: "<type>: why"} of every layer whose weights all stay float
    float_layers: Dict[str, str] = field(default_factory=dict)
    # hwquant's own: the BitWidthConfig selections whose filter matched no node (applied nowhere)
    unmatched_bit_widths: List[str] = field(default_factory=list)
    # hwquant's own, always set: the quantized model's figures (weights / activation / total memory in bytes,
    # BOPs), and the same weights and activation tensors' memory kept as float32
    resource_utilization: Optional[ResourceUtilization] = None
    float_resource_utilization: Optional[ResourceUtilization] = None

    def set_input_scale(self, scale: float) -> None:
        self.input_scale = scale

    def set_mixed_precision_cfg(self, cfg: List[int]) -> None:
        self.mixed_precision_cfg = cfg

    def set_final_resource_utilization(self, ru: ResourceUtilization) -> None:
        self.final_resource_utilization = ru

    def __repr__(self) -> str:
        gptq = f"{{{', '.join(map(str, self.gptq_info_dict))}}}" if self.gptq_info_dict else "{}"
        return (f"UserInformation(input_scale={self.input_scale}, mixed_precision_cfg={self.mixed_precision_cfg}, "
                f"final_resource_utilization={self.final_resource_utilization}, gptq_info_dict keys={gptq}, "
                f"float_layers={len(self.float_layers)})")


class DefaultDict:
    """A read-only mapping that answers `default_value` for unknown keys (e.g. layer -> kernel channels)."""

    def __init__(self, known_dict: Optional[dict] = None, default_value: Any = None):
        if known_dict is not None and not isinstance(known_dict, dict):
            raise TypeError(f"DefaultDict known_dict must be a dict or None, got {type(known_dict).__name__}")
        self.known_dict = dict(known_dict or {})
        self.default_value = default_value

    def get(self, key: Any) -> Any:
        return self.known_dict.get(key, self.default_value)

    def keys(self):
        return self.known_dict.keys()

    def items(self):
        return self.known_dict.items()

    def __contains__(self, key: Any) -> bool:  # known keys only
        return key in self.known_dict

    def __len__(self) -> int:
        return len(self.known_dict)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DefaultDict) and (self.known_dict, self.default_value) == \
            (other.known_dict, other.default_value)

    def __repr__(self) -> str:
        return f"DefaultDict({self.known_dict!r}, default_value={self.default_value!r})"
