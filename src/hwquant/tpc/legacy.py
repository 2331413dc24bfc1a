"""The older (seed) way of writing a TPC: components created inside `with tp_model:` register
themselves, and the model becomes a TPC when the block ends.

    tp_model = TargetPlatformModel(default_options, name="my_tpc")
    with tp_model:
        conv = OperatorsSet("Conv", mixed_precision_options)
        relu = OperatorsSet("ReLU")
        Fusing([conv, relu])

`TargetPlatformModel` here is a builder; once its block has ended it behaves like the
`TargetPlatformCapabilities` it built (attribute access is forwarded), and `to_tpc` unwraps it
wherever a TPC is accepted.
"""
from __future__ import annotations

from typing import Any, List, Optional, cast

from hwquant.concurrency import ContextStack
from hwquant.errors import InvalidTPCError
from hwquant.tpc import schema

_BUILDING = ContextStack()  # the TargetPlatformModel whose `with` block is open, per thread


def _register(component: Any) -> Any:
    building = _BUILDING.top()
    if building is not None:
        building._add(component)
    return component


def OperatorsSet(name: Any, qc_options: Optional[schema.QuantizationConfigOptions] = None) -> schema.OperatorsSet:
    """An operator set; inside `with tp_model:` it is added to that model."""
    return _register(schema.OperatorsSet(name=name, qc_options=qc_options))


def OperatorSetConcat(*operator_sets: schema.OperatorsSet) -> schema.OperatorSetGroup:
    """Several operator sets treated alike (a group; it is not itself an operator set)."""
    return schema.OperatorSetGroup(*operator_sets)


def Fusing(operator_groups_list: list, name: Optional[str] = None) -> schema.Fusing:
    """A fusing pattern; inside `with tp_model:` it is added to that model."""
    # (a list: the schema's validator makes it the tuple its field is declared as)
    return _register(schema.Fusing(operator_groups=cast(Any, operator_groups_list), name=name))


def get_default_quantization_config_options() -> schema.QuantizationConfigOptions:
    """The default options of the model whose `with` block is open."""
    building = _BUILDING.top()
    if building is None:
        raise InvalidTPCError("get_default_quantization_config_options() is only available inside a "
                              "`with tp_model:` block")
    return building.default_qco


class TargetPlatformModel:
    """Builder of a TPC from components registered inside its `with` block."""

    def __init__(self, default_qco: schema.QuantizationConfigOptions, add_metadata: bool = False,
                 name: str = "default_tp_model", **fields: Any):
        self._fields = dict(default_qco=default_qco, add_metadata=add_metadata, name=name, **fields)
        # Validate the default options now rather than at the end of the block.
        schema.TargetPlatformCapabilities(**self._fields)
        self._operator_sets: List[schema.OperatorsSet] = []
        self._fusings: List[schema.Fusing] = []
        self._tpc: Optional[schema.TargetPlatformCapabilities] = None

    @property
    def default_qco(self) -> schema.QuantizationConfigOptions:
        return self._fields["default_qco"]

    def set_simd_padding(self, is_simd_padding: bool) -> None:
        self._fields["is_simd_padding"] = bool(is_simd_padding)

    def _add(self, component: Any) -> None:
        if self._tpc is not None:
            raise InvalidTPCError(f"TPC '{self._fields['name']}' is already built; components can only be added "
                                  "inside its `with` block")
        (self._fusings if isinstance(component, schema.Fusing) else self._operator_sets).append(component)

    def __enter__(self) -> "TargetPlatformModel":
        if self._tpc is not None:
            raise InvalidTPCError(f"TPC '{self._fields['name']}' is already built; create a new TargetPlatformModel")
        _BUILDING.push(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _BUILDING.pop(self)
        if exc_type is None:
            self._tpc = schema.TargetPlatformCapabilities(
                operator_set=tuple(self._operator_sets), fusing_patterns=tuple(self._fusings), **self._fields)

    @property
    def tpc(self) -> schema.TargetPlatformCapabilities:
        if self._tpc is None:
            raise InvalidTPCError(f"TPC '{self._fields['name']}' is not built yet: add its operator sets inside "
                                  "`with tp_model:` first")
        return self._tpc

    def __getattr__(self, item: str) -> Any:
        if item.startswith("_"):
            raise AttributeError(item)
        return getattr(self.tpc, item)


def to_tpc(obj: Any) -> schema.TargetPlatformCapabilities:
    """The TargetPlatformCapabilities behind a TPC, a legacy TargetPlatformModel, or a framework attachment."""
    if isinstance(obj, TargetPlatformModel):
        return obj.tpc
    inner = getattr(obj, "tpc", None)  # FrameworkQuantizationCapabilities
    if isinstance(inner, (schema.TargetPlatformCapabilities, TargetPlatformModel)):
        return to_tpc(inner)
    if isinstance(obj, schema.TargetPlatformCapabilities):
        return obj
    raise TypeError(f"expected a TargetPlatformCapabilities, got {type(obj).__name__}")
