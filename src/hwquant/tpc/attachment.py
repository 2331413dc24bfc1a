"""Attaching a framework's layers to a TPC's operator sets.

The TPC speaks of operator sets ("Conv", "ReLU"); a framework adapter says which of its layers,
functions and tensor methods belong to each set (`OperationsSetToLayers`) and how the TPC's
neutral weight-attribute names map onto the layer's own (KERNEL_ATTR -> "weight").
`FrameworkQuantizationCapabilities` (the older API calls it `TargetPlatformCapabilities`) joins a
TPC with that attachment and answers the pipeline's one question: what options does this layer get?
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

from hwquant.concurrency import ContextStack
from hwquant.errors import InvalidTPCError
from hwquant.tpc.enums import OperatorSetNames
from hwquant.tpc.layer_filters import LayerFilterParams
from hwquant.tpc.legacy import to_tpc
from hwquant.tpc.schema import QuantizationConfigOptions

# The attachment being filled inside `with fqc:` blocks (the older API registers implicitly), per thread.
_ATTACH_STACK = ContextStack()


def _layer_name(layer: Any) -> str:
    if isinstance(layer, LayerFilterParams):
        return repr(layer)
    return getattr(layer, "__qualname__", None) or getattr(layer, "__name__", None) or repr(layer)


class OperationsSetToLayers:
    """The layers (types, functions, LayerFilterParams) of one operator set, and the mapping from
    the TPC's attribute names to the layers' attribute names."""

    def __init__(self, op_set_name: Any, layers: Sequence[Any], attr_mapping: Optional[Dict[str, Any]] = None):
        name = op_set_name.value if isinstance(op_set_name, OperatorSetNames) else op_set_name
        if not isinstance(name, str) or not name:
            raise ValueError(f"OperationsSetToLayers: op_set_name must be an operator-set name, got {op_set_name!r}")
        if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
            raise TypeError(f"OperationsSetToLayers('{name}'): layers must be a list of layer types, functions "
                            f"or LayerFilterParams, got {type(layers).__name__}")
        if attr_mapping is not None and not isinstance(attr_mapping, dict):
            raise TypeError(f"OperationsSetToLayers('{name}'): attr_mapping must be a dict, got {type(attr_mapping).__name__}")
        self.name = name
        self.layers = list(layers)
        self.attr_mapping = dict(attr_mapping or {})
        fqc = _ATTACH_STACK.top()
        if fqc is not None:
            fqc.attach(self)

    def layer_attr_name(self, tpc_attr: str, layer: Any = None) -> str:
        """The layer's own name for a TPC attribute (values may be per-layer dicts, as in
        MCT's DefaultDict-valued mappings)."""
        mapped = self.attr_mapping.get(tpc_attr, tpc_attr)
        if isinstance(mapped, str):
            return mapped
        found = mapped.get(layer)  # a dict or DefaultDict keyed by layer
        return tpc_attr if found is None else found

    def __repr__(self) -> str:
        return f"OperationsSetToLayers({self.name!r}, [{', '.join(_layer_name(x) for x in self.layers)}])"


class OperationsToLayers:
    """All attachments of one framework; one layer (without filter) may belong to one set only."""

    def __init__(self, op_sets_to_layers: Optional[Sequence[OperationsSetToLayers]] = None):
        self.op_sets_to_layers: List[OperationsSetToLayers] = []
        for entry in op_sets_to_layers or ():
            self.add(entry)

    def add(self, entry: OperationsSetToLayers) -> None:
        if not isinstance(entry, OperationsSetToLayers):
            raise TypeError(f"expected OperationsSetToLayers, got {type(entry).__name__}")
        if any(e.name == entry.name for e in self.op_sets_to_layers):
            raise ValueError(f"operator set '{entry.name}' is attached twice; list all its layers in one "
                             "OperationsSetToLayers")
        plain = {layer for e in self.op_sets_to_layers for layer in e.layers if not isinstance(layer, LayerFilterParams)}
        clash = [layer for layer in entry.layers if not isinstance(layer, LayerFilterParams) and layer in plain]
        if clash:
            raise ValueError(f"layer(s) {[_layer_name(layer) for layer in clash]} attached to '{entry.name}' already belong to "
                             "another operator set; use LayerFilterParams to split a layer type by its attributes")
        self.op_sets_to_layers.append(entry)

    def get_layers_by_op(self, op_set_name: Any) -> List[Any]:
        entry = self.get_entry(op_set_name)
        return list(entry.layers) if entry else []

    def get_entry(self, op_set_name: Any) -> Optional[OperationsSetToLayers]:
        name = op_set_name.value if isinstance(op_set_name, OperatorSetNames) else op_set_name
        return next((e for e in self.op_sets_to_layers if e.name == name), None)

    def find(self, layer_type: Any, attrs: Optional[Dict[str, Any]] = None) -> Optional[OperationsSetToLayers]:
        """The set a layer belongs to: a matching LayerFilterParams wins over a plain type entry."""
        attrs = attrs or {}
        plain_match = None
        for entry in self.op_sets_to_layers:
            for layer in entry.layers:
                if isinstance(layer, LayerFilterParams):
                    if layer.match(layer_type, attrs):
                        return entry
                elif plain_match is None and layer == layer_type:
                    plain_match = entry
        return plain_match

    def __iter__(self):
        return iter(self.op_sets_to_layers)


def get_current_tpc() -> "FrameworkQuantizationCapabilities":
    """The FrameworkQuantizationCapabilities whose `with` block is open (the one that
    `OperationsSetToLayers(...)` attaches to)."""
    fqc = _ATTACH_STACK.top()
    if fqc is None:
        raise InvalidTPCError("no FrameworkQuantizationCapabilities is being defined: get_current_tpc() works "
                              "inside a `with fqc:` block")
    return fqc


class FrameworkQuantizationCapabilities:
    """A TPC attached to one framework's layers.

    Used as a context manager by the older API: `OperationsSetToLayers(...)` created inside
    `with fqc:` are attached to it.
    """

    def __init__(self, tpc: Any, name: str = "base", version: Optional[str] = None,
                 op_sets_to_layers: Optional[Sequence[OperationsSetToLayers]] = None):
        self.tpc = to_tpc(tpc)
        self.name = name
        self.version = version
        self.op_sets_to_layers = OperationsToLayers()
        for entry in op_sets_to_layers or ():
            self.attach(entry)

    # ---- building --------------------------------------------------------------------------
    def attach(self, entry: OperationsSetToLayers) -> None:
        """Add an attachment; its operator set must exist in the TPC (a typo would otherwise
        silently leave those layers with the default options)."""
        if not self.tpc.is_opset_in_model(entry.name):
            known = sorted(s.name for s in self.tpc.operator_set or ())
            raise InvalidTPCError(f"layers are attached to operator set '{entry.name}' that TPC '{self.tpc.name}' "
                                  f"does not define; its operator sets are {known}")
        self.op_sets_to_layers.add(entry)

    def __enter__(self) -> "FrameworkQuantizationCapabilities":
        _ATTACH_STACK.push(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _ATTACH_STACK.pop(self)

    # ---- queries ---------------------------------------------------------------------------
    def get_layers_by_opset_name(self, name: Any) -> List[Any]:
        return self.op_sets_to_layers.get_layers_by_op(name)

    def opset_of(self, layer_type: Any, attrs: Optional[Dict[str, Any]] = None) -> Optional[str]:
        """Name of the operator set a layer belongs to (None: not attached, TPC defaults apply)."""
        entry = self.op_sets_to_layers.find(layer_type, attrs)
        return entry.name if entry and self.tpc.is_opset_in_model(entry.name) else None

    def get_qco(self, layer_type: Any, attrs: Optional[Dict[str, Any]] = None) -> QuantizationConfigOptions:
        """The options of a layer, with weight attributes renamed to the layer's own names."""
        entry = self.op_sets_to_layers.find(layer_type, attrs)
        if entry is None or not self.tpc.is_opset_in_model(entry.name):
            return self.tpc.default_qco
        qco = self.tpc.get_config_options_by_operators_set(entry.name)
        names = {a for c in qco.quantization_configurations for a in c.attr_weights_configs_mapping}
        return qco.clone_and_map_weights_attr_keys({a: entry.layer_attr_name(a, layer_type) for a in names})

    def fusing_patterns_as_layers(self) -> List[List[List[Any]]]:
        """Each fusing pattern as, per position, the list of layers that may stand there."""
        return [[[layer for n in names for layer in self.get_layers_by_opset_name(n)] for names in f.member_names()]
                for f in self.tpc.fusing_patterns or ()]

    @property
    def default_qco(self) -> QuantizationConfigOptions:
        return self.tpc.default_qco

    def show(self) -> None:
        self.tpc.show()
        print("  attached layers:")
        for e in self.op_sets_to_layers:
            print(f"    {e.name}: {', '.join(_layer_name(layer) for layer in e.layers)}")

    def __repr__(self) -> str:
        return (f"FrameworkQuantizationCapabilities(tpc={self.tpc.name!r}, name={self.name!r}, "
                f"sets={len(self.op_sets_to_layers.op_sets_to_layers)})")


def attach_with_table(tpc: Any, table: Dict[str, List[Any]], attr_mapping: Dict[str, Dict[str, str]],
                      framework: str, custom_opset_to_layer: Optional[Dict[str, Any]] = None
                      ) -> "FrameworkQuantizationCapabilities":
    """The TPC attached to a framework's layers through its table {operator set: layers} and the
    framework's names of the TPC's weight attributes. Every operator set of the TPC must be in the
    table or in `custom_opset_to_layer` ({name: (layers, attr_mapping)}), which takes precedence."""
    custom = custom_opset_to_layer or {}
    fqc = FrameworkQuantizationCapabilities(tpc, name=framework)
    for opset in fqc.tpc.operator_set or ():
        if opset.name in custom:
            layers, *rest = custom[opset.name]
            fqc.attach(OperationsSetToLayers(opset.name, layers, attr_mapping=rest[0] if rest else None))
        elif opset.name in table:
            if table[opset.name]:
                fqc.attach(OperationsSetToLayers(opset.name, table[opset.name], attr_mapping=attr_mapping.get(opset.name)))
        else:
            raise InvalidTPCError(
                f"operator set '{opset.name}' of TPC '{fqc.tpc.name}' is not a {framework} operator set hwquant knows; "
                f"attach layers to it with QuantizationConfig(custom_tpc_opset_to_layer={{'{opset.name}': "
                f"([your layer types or functions], None)}}), or rename it to one of OperatorSetNames")
    unknown_custom = sorted(set(custom) - {s.name for s in fqc.tpc.operator_set or ()})
    if unknown_custom:
        raise InvalidTPCError(f"custom_tpc_opset_to_layer names operator set(s) {unknown_custom} that TPC "
                              f"'{fqc.tpc.name}' does not define")
    return fqc


def whole_table(table: Dict[str, List[Any]]) -> OperationsToLayers:
    """A framework's whole table {operator set: layers} as attachments, whatever a TPC defines (to tell what
    kind of operation a layer is)."""
    return OperationsToLayers([OperationsSetToLayers(name, layers) for name, layers in table.items() if layers])
