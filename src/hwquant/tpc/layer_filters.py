"""Attribute filters and LayerFilterParams: attach an operator set to layers of one type whose
attributes satisfy conditions (e.g. a Hardtanh with min_val=0 counts as a ReLU6-like activation).

A filter looks at a layer's attribute dictionary (constructor arguments of a module, keyword
arguments of a function call). Filters combine with `&` and `|`.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Dict, Optional


class AttributeFilter:
    """Condition on one attribute: `op(attrs[attr], value)`; an absent attribute never matches.
    The named filters (Eq, Greater, ...) fix `op`; `AttributeFilter(attr, value, op)` takes any
    two-argument predicate (MCT's signature)."""

    symbol = "?"
    op: Optional[Callable[[Any, Any], bool]] = None

    def __init__(self, attr: str, value: Any, op: Optional[Callable[[Any, Any], bool]] = None):
        if not isinstance(attr, str) or not attr:
            raise ValueError(f"{type(self).__name__}: attr must be a non-empty attribute name, got {attr!r}")
        if op is not None:
            if not callable(op):
                raise ValueError(f"{type(self).__name__}: op must be a function of (attribute value, filter value), "
                                 f"got {op!r}")
            self.op = op
            self.symbol = getattr(op, "__name__", repr(op))
        elif self.op is None:
            raise ValueError("AttributeFilter needs op, a function of (attribute value, filter value), e.g. "
                             "AttributeFilter('min_val', 0, operator.eq); or use Eq, Greater, ...")
        self.attr = attr
        self.value = value

    def match(self, attrs: Dict[str, Any]) -> bool:
        if self.attr not in attrs:
            return False
        assert self.op is not None  # __init__ refuses a filter without one
        try:
            return bool(self.op(attrs[self.attr], self.value))
        except TypeError:  # e.g. comparing None with a number: the condition simply does not hold
            return False

    def __and__(self, other: "AttributeFilter") -> "AttributeFilter":
        return AndAttributeFilter(self, other)

    def __or__(self, other: "AttributeFilter") -> "AttributeFilter":
        return OrAttributeFilter(self, other)

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.attr, repr(self.value)))

    def __repr__(self) -> str:
        return f"{self.attr} {self.symbol} {self.value!r}"


class _Combined(AttributeFilter):
    joiner = "?"

    def __init__(self, *filters: AttributeFilter):
        for f in filters:
            if not isinstance(f, AttributeFilter):
                raise TypeError(f"can only combine attribute filters, got {type(f).__name__}")
        self.filters = filters

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.filters))

    def __repr__(self) -> str:
        return "(" + f" {self.joiner} ".join(map(repr, self.filters)) + ")"


class AndAttributeFilter(_Combined):
    joiner = "&"

    def match(self, attrs: Dict[str, Any]) -> bool:
        return all(f.match(attrs) for f in self.filters)


class OrAttributeFilter(_Combined):
    joiner = "|"

    def match(self, attrs: Dict[str, Any]) -> bool:
        return any(f.match(attrs) for f in self.filters)


def _filter(name: str, symbol: str, fn: Callable[[Any, Any], bool], doc: str) -> type:
    return type(name, (AttributeFilter,), {"symbol": symbol, "op": staticmethod(fn), "__doc__": doc})


Eq = _filter("Eq", "==", operator.eq, "Attribute equals the value.")
NotEq = _filter("NotEq", "!=", operator.ne, "Attribute differs from the value.")
Greater = _filter("Greater", ">", operator.gt, "Attribute is greater than the value.")
GreaterEq = _filter("GreaterEq", ">=", operator.ge, "Attribute is greater than or equal to the value.")
Smaller = _filter("Smaller", "<", operator.lt, "Attribute is smaller than the value.")
SmallerEq = _filter("SmallerEq", "<=", operator.le, "Attribute is smaller than or equal to the value.")
Contains = _filter("Contains", "contains", lambda a, v: v in a, "Attribute (a container or string) contains the value.")


class LayerFilterParams:
    """A layer type plus conditions on its attributes: `LayerFilterParams(nn.Hardtanh, min_val=0)`
    or `LayerFilterParams(nn.Hardtanh, Eq('min_val', 0) & Smaller('max_val', 7))`."""

    def __init__(self, layer: Any, *conditions: AttributeFilter, **kwargs: Any):
        for c in conditions:
            if not isinstance(c, AttributeFilter):
                raise TypeError(f"LayerFilterParams conditions must be attribute filters (Eq, Greater, ...), "
                                f"got {type(c).__name__}; pass exact values as keyword arguments instead")
        self.layer = layer
        self.conditions = conditions
        self.kwargs = kwargs

    def match(self, layer_type: Any, attrs: Dict[str, Any]) -> bool:
        """Whether a layer of `layer_type` with attribute dictionary `attrs` passes this filter."""
        if layer_type != self.layer:
            return False
        if any(k not in attrs or attrs[k] != v for k, v in self.kwargs.items()):
            return False
        return all(c.match(attrs) for c in self.conditions)

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, LayerFilterParams) and self.layer == other.layer
                and self.conditions == other.conditions and self.kwargs == other.kwargs)

    def __hash__(self) -> int:
        return hash((self.layer, self.conditions, tuple(sorted(self.kwargs.items(), key=lambda kv: kv[0]))))

    def __repr__(self) -> str:
        parts = [getattr(self.layer, "__name__", repr(self.layer))]
        parts += [repr(c) for c in self.conditions] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"LayerFilterParams({', '.join(parts)})"
