"""The target platform capabilities (TPC) schema: what the hardware does with each operator.

Frozen, validated pydantic models that round-trip through JSON. Construction refuses a TPC that
makes no sense (the error names the field and the rule), so every later stage can trust it.
`SCHEMA_VERSION` is the version written into JSON files; older versions are migrated by
`hwquant.tpc.serialization`.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Dict, Final, Literal, Optional, Sequence, Tuple, Union, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from typing_extensions import Annotated

from hwquant.constants import FLOAT_BITWIDTH, MAX_N_BITS, MIN_N_BITS
from hwquant.tpc.enums import OperatorSetNames, QuantizationMethod, Signedness

SCHEMA_VERSION: Final = 2

_FROZEN = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


def _check_n_bits(value: int, field: str, allow_float: bool) -> int:
    """A bit width is 2..16, or 32 (float, i.e. not quantized) where the tensor is left float."""
    if MIN_N_BITS <= value <= MAX_N_BITS or (allow_float and value == FLOAT_BITWIDTH):
        return value
    allowed = f"{MIN_N_BITS}..{MAX_N_BITS}" + (f" (or {FLOAT_BITWIDTH} for float)" if allow_float else "")
    raise ValueError(f"{field}={value} is out of range: bit widths must be {allowed}")


def _list_to_tuple(v: Any) -> Any:
    """A list given for a tuple field (as JSON gives them) as a tuple."""
    return tuple(v) if isinstance(v, list) else v


def _name_of(x: Any) -> str:
    return x.value if isinstance(x, OperatorSetNames) else str(x)


def _opset_name(v: Any) -> Any:
    """An operator set's name as stored (MCT's schema misspells OperatorSetNames.EXPAND; read as the same set)."""
    v = _name_of(v) if isinstance(v, OperatorSetNames) else v
    return OperatorSetNames.EXPAND.value if v == "Expend" else v


def bind_positional(owner: str, order: Sequence[str], args: tuple, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """`kwargs` with `args` given to the names of `order` (the older APIs take fields positionally)."""
    if len(args) > len(order):
        raise TypeError(f"{owner} takes at most {len(order)} positional arguments ({', '.join(order) or 'none'}), "
                        f"got {len(args)}")
    for name, value in zip(order, args):
        if name in kwargs:
            raise TypeError(f"{owner} got two values for '{name}' (positional and keyword)")
        kwargs[name] = value
    return kwargs


class _Frozen(BaseModel):
    """Base of every schema model: frozen, no unknown fields, validated edits.

    `_positional` lists the fields that may also be given positionally, in the order of the
    older API (which had plain classes with positional constructors).
    """

    model_config = _FROZEN
    _positional: ClassVar[Tuple[str, ...]] = ()

    def __init__(self, *args: Any, **data: Any):
        super().__init__(**bind_positional(type(self).__name__, self._positional, args, data))

    def _edited(self, **changes: Any):
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            raise ValueError(
                f"{type(self).__name__} has no field(s) {unknown}; valid fields: {sorted(type(self).model_fields)}")
        data = {**{name: getattr(self, name) for name in type(self).model_fields}, **changes}
        return type(self).model_validate(data)  # re-validate: model_copy would skip the rules


class AttributeQuantizationConfig(_Frozen):
    """How one weight attribute of an operator (its kernel, its bias, ...) is quantized."""

    weights_quantization_method: QuantizationMethod = QuantizationMethod.POWER_OF_TWO
    weights_n_bits: int = FLOAT_BITWIDTH
    weights_per_channel_threshold: bool = False
    enable_weights_quantization: bool = False
    lut_values_bitwidth: Optional[int] = None

    @model_validator(mode="after")
    def _rules(self):
        _check_n_bits(self.weights_n_bits, "weights_n_bits", allow_float=not self.enable_weights_quantization)
        if self.lut_values_bitwidth is not None:
            _check_n_bits(self.lut_values_bitwidth, "lut_values_bitwidth", allow_float=False)
        return self

    @property
    def field_names(self) -> list:
        return list(type(self).model_fields)

    def clone_and_edit(self, **kwargs: Any) -> "AttributeQuantizationConfig":
        """A copy with some fields changed (validated like a new object)."""
        return self._edited(**kwargs)


class OpQuantizationConfig(_Frozen):
    """How an operator is quantized: its activation (output) and its weight attributes."""

    default_weight_attr_config: AttributeQuantizationConfig
    attr_weights_configs_mapping: Dict[str, AttributeQuantizationConfig]
    activation_quantization_method: QuantizationMethod
    activation_n_bits: int
    supported_input_activation_n_bits: Tuple[int, ...]
    enable_activation_quantization: bool
    quantization_preserving: bool
    signedness: Signedness
    fixed_scale: Optional[float] = None
    fixed_zero_point: Optional[int] = None
    simd_size: Optional[int] = None

    # The older API's positional order.
    _positional = ("default_weight_attr_config", "attr_weights_configs_mapping", "activation_quantization_method",
                   "activation_n_bits", "supported_input_activation_n_bits", "enable_activation_quantization",
                   "quantization_preserving", "fixed_scale", "fixed_zero_point", "simd_size", "signedness")

    @field_validator("supported_input_activation_n_bits", mode="before")
    @classmethod
    def _as_tuple(cls, v: Any) -> Any:
        return (v,) if isinstance(v, int) and not isinstance(v, bool) else _list_to_tuple(v)

    @model_validator(mode="after")
    def _rules(self):
        if self.activation_quantization_method.is_lut:
            raise ValueError(
                f"activation_quantization_method={self.activation_quantization_method.name}: lookup-table "
                "quantization is for weights only; use POWER_OF_TWO, SYMMETRIC or UNIFORM for activations")
        _check_n_bits(self.activation_n_bits, "activation_n_bits", allow_float=not self.enable_activation_quantization)
        if not self.supported_input_activation_n_bits:
            raise ValueError("supported_input_activation_n_bits must name at least one bit width")
        for b in self.supported_input_activation_n_bits:
            _check_n_bits(b, "supported_input_activation_n_bits", allow_float=True)
        for attr in self.attr_weights_configs_mapping:
            if not attr:
                raise ValueError("attr_weights_configs_mapping keys must be non-empty attribute names")
        if self.fixed_scale is not None and not (math.isfinite(self.fixed_scale) and self.fixed_scale > 0):
            raise ValueError(f"fixed_scale={self.fixed_scale} must be a finite positive number (or None)")
        if self.fixed_zero_point is not None and self.fixed_scale is None:
            raise ValueError("fixed_zero_point is given without fixed_scale: a fixed quantizer needs both")
        if self.simd_size is not None and self.simd_size < 1:
            raise ValueError(f"simd_size={self.simd_size} must be a positive integer (or None)")
        if self.quantization_preserving and self.fixed_scale is not None:
            raise ValueError("quantization_preserving ops reuse their input's quantizer; they cannot also have a fixed_scale")
        return self

    def get_info(self) -> Dict[str, Any]:
        return self.model_dump()

    def clone_and_edit(self, attr_to_edit: Optional[Dict[str, Dict[str, Any]]] = None, **kwargs: Any) -> "OpQuantizationConfig":
        """A copy with top-level fields changed by `kwargs` and weight attributes changed by
        `attr_to_edit` ({attribute name: {field: value}})."""
        attr_to_edit = attr_to_edit or {}
        mapping = dict(kwargs.pop("attr_weights_configs_mapping", self.attr_weights_configs_mapping))
        missing = sorted(set(attr_to_edit) - set(mapping))
        if missing:
            raise ValueError(f"attr_to_edit names attribute(s) {missing} that this config does not have; "
                             f"it has {sorted(mapping)}")
        for attr, edits in attr_to_edit.items():
            mapping[attr] = mapping[attr].clone_and_edit(**edits)
        return self._edited(attr_weights_configs_mapping=mapping, **kwargs)


class QuantizationConfigOptions(_Frozen):
    """The candidate configurations of an operator set; `base_config` is used without mixed precision."""

    quantization_configurations: Tuple[OpQuantizationConfig, ...]
    base_config: Optional[OpQuantizationConfig] = None

    _positional = ("quantization_configurations", "base_config")

    def __init__(self, *args: Any, quantization_config_list: Any = None, **data: Any):
        # The older API named the options `quantization_config_list`.
        if quantization_config_list is not None:
            data["quantization_configurations"] = quantization_config_list
        super().__init__(*args, **data)

    @property
    def quantization_config_list(self) -> list:
        return list(self.quantization_configurations)

    _as_tuple = field_validator("quantization_configurations", mode="before")(_list_to_tuple)

    @model_validator(mode="after")
    def _rules(self):
        options = self.quantization_configurations
        if not options:
            raise ValueError("quantization_configurations is empty: give at least one OpQuantizationConfig")
        if len({o.model_dump_json() for o in options}) != len(options):
            raise ValueError("quantization_configurations holds the same configuration twice; options must differ")
        if self.base_config is None:
            if len(options) > 1:
                raise ValueError("base_config is required when there is more than one option "
                                 "(it is the configuration used without mixed precision)")
            object.__setattr__(self, "base_config", options[0])
        elif self.base_config not in options:
            raise ValueError("base_config must be one of quantization_configurations")
        return self

    def clone_and_edit(self, **kwargs: Any) -> "QuantizationConfigOptions":
        """Edit every option (and the base config the same way)."""
        return self._map(lambda cfg: cfg.clone_and_edit(**kwargs))

    def clone_and_edit_weight_attribute(self, attrs: Optional[list] = None, **kwargs: Any) -> "QuantizationConfigOptions":
        """Edit the named weight attributes (all when `attrs` is None) of every option."""
        def edit(cfg: OpQuantizationConfig) -> OpQuantizationConfig:
            names = list(cfg.attr_weights_configs_mapping) if attrs is None else list(attrs)
            return cfg.clone_and_edit(attr_to_edit={a: kwargs for a in names})
        return self._map(edit)

    def clone_and_map_weights_attr_keys(self,
                                        layer_attrs_mapping: Optional[Dict[str, str]] = None) -> "QuantizationConfigOptions":
        """Rename weight attributes (e.g. the neutral KERNEL_ATTR to a framework's 'weight')."""
        mapping = layer_attrs_mapping or {}
        return self._map(lambda cfg: cfg.clone_and_edit(attr_weights_configs_mapping={
            mapping.get(a, a): c for a, c in cfg.attr_weights_configs_mapping.items()}))

    def _map(self, fn) -> "QuantizationConfigOptions":
        new = tuple(fn(c) for c in self.quantization_configurations)
        base = new[self.quantization_configurations.index(self.base_config)]
        return QuantizationConfigOptions(quantization_configurations=new, base_config=base)

    def get_info(self) -> Dict[str, Any]:
        return {f"option_{i}": cfg.get_info() for i, cfg in enumerate(self.quantization_configurations)}


class OperatorsSet(_Frozen):
    """A labelled set of operators; its `qc_options` apply to every operator attached to it
    (None: the TPC's default options; such sets also serve as fusing members)."""

    name: str
    qc_options: Optional[QuantizationConfigOptions] = None
    type: Literal["OperatorsSet"] = "OperatorsSet"

    _positional = ("name", "qc_options")

    @field_validator("name", mode="before")
    @classmethod
    def _plain_name(cls, v: Any) -> Any:
        v = _opset_name(v)
        if isinstance(v, str) and not v.strip():
            raise ValueError("an operator set needs a non-empty name")
        return v

    def get_info(self) -> Dict[str, Any]:
        return {"name": self.name}


class OperatorSetGroup(_Frozen):
    """Several operator sets treated alike (e.g. any activation after a convolution, in fusing)."""

    operators_set: Tuple[OperatorsSet, ...]
    name: Optional[str] = None
    type: Literal["OperatorSetGroup"] = "OperatorSetGroup"

    def __init__(self, *sets: Any, **data: Any):
        # Older spellings: OperatorSetConcat([a, b]) or OperatorSetConcat(a, b).
        if sets:
            data["operators_set"] = tuple(sets[0]) if len(sets) == 1 and isinstance(sets[0], (list, tuple)) else sets
        BaseModel.__init__(self, **data)

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("name") is None and isinstance(data.get("operators_set"), (list, tuple)):
            names = [getattr(s, "name", None) or (s.get("name") if isinstance(s, dict) else None) for s in data["operators_set"]]
            if all(isinstance(n, (str, OperatorSetNames)) for n in names):
                data = {**data, "name": "_".join(_opset_name(n) for n in names)}
        return data

    @model_validator(mode="after")
    def _rules(self):
        if not self.operators_set:
            raise ValueError("operators_set is empty: an OperatorSetGroup needs at least one OperatorsSet")
        return self

    def get_info(self) -> Dict[str, Any]:
        return {"name": self.name, "operators_set": [s.get_info() for s in self.operators_set]}


OperatorGroup = Annotated[Union[OperatorsSet, OperatorSetGroup], Field(discriminator="type")]


class Fusing(_Frozen):
    """A sequence of operator groups executed as one operator: no activation quantization between them."""

    operator_groups: Tuple[OperatorGroup, ...]
    fuse_op_quantization_config: Optional[OpQuantizationConfig] = None
    name: Optional[str] = None

    _positional = ("operator_groups", "name")

    _as_tuple = field_validator("operator_groups", mode="before")(_list_to_tuple)

    @model_validator(mode="after")
    def _rules(self):
        if len(self.operator_groups) < 2:
            raise ValueError(f"a Fusing needs at least two operator groups, got {len(self.operator_groups)}")
        if self.name is None:
            object.__setattr__(self, "name", "_".join(g.name for g in self.operator_groups))
        return self

    def member_names(self) -> Tuple[Tuple[str, ...], ...]:
        """For each position of the pattern, the operator-set names that may stand there."""
        return tuple((g.name,) if isinstance(g, OperatorsSet) else tuple(s.name for s in g.operators_set)
                     for g in self.operator_groups)

    def contains(self, other: Any) -> bool:
        """Whether `other` (a Fusing) matches a contiguous part of this pattern."""
        if not isinstance(other, Fusing):
            return False
        mine, theirs = self.member_names(), other.member_names()
        return any(all(set(theirs[j]) <= set(mine[i + j]) for j in range(len(theirs)))
                   for i in range(len(mine) - len(theirs) + 1))

    def get_info(self) -> Dict[str, str]:
        # the validators name every fusing and group (_rules here, _default_name there)
        return {cast(str, self.name): " -> ".join(cast(str, g.name) for g in self.operator_groups)}


class TargetPlatformCapabilities(_Frozen):
    """The whole hardware description: default options, operator sets and fusing patterns."""

    default_qco: QuantizationConfigOptions
    operator_set: Optional[Tuple[OperatorsSet, ...]] = None
    fusing_patterns: Optional[Tuple[Fusing, ...]] = None
    tpc_minor_version: Optional[int] = None
    tpc_patch_version: Optional[int] = None
    tpc_platform_type: Optional[str] = None
    add_metadata: bool = True
    name: Optional[str] = "default_tpc"
    is_simd_padding: bool = False
    insert_preserving_quantizers: bool = False
    SCHEMA_VERSION: Literal[2] = SCHEMA_VERSION

    _positional = ("default_qco",)

    _as_tuple = field_validator("operator_set", "fusing_patterns", mode="before")(_list_to_tuple)

    @model_validator(mode="after")
    def _rules(self):
        n_default = len(self.default_qco.quantization_configurations)
        if n_default != 1:
            raise ValueError(f"default_qco must hold exactly one option (it has {n_default}): "
                             "the default applies to operators no set names, without mixed precision")
        names = [s.name for s in self.operator_set or ()]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"operator set names must be unique; repeated: {duplicates}")
        declared = set(names)
        for fusing in self.fusing_patterns or ():
            undeclared = sorted({n for group in fusing.member_names() for n in group} - declared)
            if undeclared:
                raise ValueError(f"fusing pattern '{fusing.name}' uses operator set(s) {undeclared} "
                                 "that are not in operator_set; declare them there first")
        patterns = [f.member_names() for f in self.fusing_patterns or ()]
        if len(set(patterns)) != len(patterns):
            raise ValueError("fusing_patterns holds the same pattern twice")
        for v, field in ((self.tpc_minor_version, "tpc_minor_version"), (self.tpc_patch_version, "tpc_patch_version")):
            if v is not None and v < 0:
                raise ValueError(f"{field}={v} must be a non-negative integer")
        return self

    # ---- queries used by the pipeline -------------------------------------------------------
    def get_opset_by_name(self, name: Any) -> Optional[OperatorsSet]:
        name = _name_of(name)
        return next((s for s in self.operator_set or () if s.name == name), None)

    def is_opset_in_model(self, name: Any) -> bool:
        return self.get_opset_by_name(name) is not None

    def get_config_options_by_operators_set(self, name: Any) -> QuantizationConfigOptions:
        """The options of a set; the TPC default where the set is absent or has none of its own."""
        opset = self.get_opset_by_name(name)
        return opset.qc_options if opset is not None and opset.qc_options is not None else self.default_qco

    def get_default_op_quantization_config(self) -> OpQuantizationConfig:
        return self.default_qco.quantization_configurations[0]

    @property
    def version(self) -> str:
        return f"{self.tpc_minor_version}.{self.tpc_patch_version}"

    # ---- presentation ------------------------------------------------------------------------
    def get_info(self) -> Dict[str, Any]:
        return {
            "Model name": self.name,
            "Operators sets": [o.get_info() for o in self.operator_set or ()],
            "Fusing patterns": [f.get_info() for f in self.fusing_patterns or ()],
        }

    def show(self) -> None:
        """Print a readable summary: platform, default config and each operator set's options."""
        print(describe(self))


def _describe_op_config(cfg: OpQuantizationConfig) -> str:
    if cfg.quantization_preserving:
        act = "preserves its input's quantization"
    elif not cfg.enable_activation_quantization:
        act = "activation float"
    else:
        act = f"activation {cfg.activation_quantization_method.name} {cfg.activation_n_bits}b"
        if cfg.signedness is not Signedness.AUTO:
            act += f" {cfg.signedness.name.lower()}"
        if cfg.fixed_scale is not None:
            act += f" fixed scale {cfg.fixed_scale:g} zp {cfg.fixed_zero_point}"
    def weights(name: str, a: AttributeQuantizationConfig) -> str:
        if not a.enable_weights_quantization:
            return f"{name} float"
        per = "per-channel" if a.weights_per_channel_threshold else "per-tensor"
        return f"{name} {a.weights_quantization_method.name} {a.weights_n_bits}b {per}"
    d = cfg.default_weight_attr_config
    parts = [act] + ([weights("constants", d)] if d.enable_weights_quantization else [])
    return "; ".join(parts + [weights(attr, a) for attr, a in sorted(cfg.attr_weights_configs_mapping.items())])


def describe(tpc: TargetPlatformCapabilities) -> str:
    """Human-readable multi-line description of a TPC (what `show()` prints)."""
    lines = [f"TPC '{tpc.name}' platform={tpc.tpc_platform_type} version={tpc.version} "
             f"schema={tpc.SCHEMA_VERSION} simd_padding={tpc.is_simd_padding}",
             f"  default: {_describe_op_config(tpc.get_default_op_quantization_config())}",
             "  operator sets:"]
    for s in tpc.operator_set or ():
        if s.qc_options is None:
            lines.append(f"    {s.name}: default")
            continue
        opts, base = s.qc_options.quantization_configurations, s.qc_options.base_config
        assert base is not None  # QuantizationConfigOptions' validator always sets it
        lines.append(f"    {s.name}: {_describe_op_config(base)}"
                     + (f"  [+{len(opts) - 1} mixed-precision option(s)]" if len(opts) > 1 else ""))
        for o in opts:
            if o != base:
                lines.append(f"      option: {_describe_op_config(o)}")
    lines.append("  fusing patterns:")
    for f in tpc.fusing_patterns or ():
        lines.append("    " + " -> ".join("(" + " | ".join(m) + ")" if len(m) > 1 else m[0] for m in f.member_names()))
    return "\n".join(lines)
