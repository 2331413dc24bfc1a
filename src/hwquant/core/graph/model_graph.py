"""The framework-free model graph every algorithm works on.

A framework adapter captures a model into a `Graph` of `Node`s (one per layer, function call or
tensor method), runs it, and builds a model back from it. The core sees weights as numpy arrays,
the operator's kind as an opaque `type` (the layer class or function; used only for matching with
the TPC attachment and filters) and `framework_attr` (the layer's constructor attributes or the
call's keyword arguments). How to call the operator (`call_target`, `call_args`, `call_kwargs`) is
kept for the adapter and never interpreted here, except that `InputRef(i)` marks where the i-th
input tensor goes.

Each node has one output (a tensor, or a tuple that `getitem` nodes take apart). Nodes are kept in
topological order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Container, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

WeightKey = Union[str, int]  # a named attribute ('weight') or the position of a constant argument


@dataclass(frozen=True)
class InputRef:
    """Placeholder inside `call_args` / `call_kwargs`: the node's `index`-th input tensor."""

    index: int


class NodeKind:
    INPUT = "input"          # a model input
    MODULE = "module"        # a layer (call_target: the layer object)
    FUNCTION = "function"    # a function call (call_target: the function)
    METHOD = "method"        # a tensor method (call_target: the method name)
    CONSTANT = "constant"    # a tensor constant of the model (value in weights[0])


@dataclass(eq=False)
class Node:
    name: str
    kind: str
    type: Any
    inputs: List[str] = field(default_factory=list)
    framework_attr: Dict[str, Any] = field(default_factory=dict)
    weights: Dict[WeightKey, np.ndarray] = field(default_factory=dict)
    call_target: Any = None
    call_args: tuple = ()
    call_kwargs: Dict[str, Any] = field(default_factory=dict)
    output_shape: Any = None          # tuple of ints for a tensor output, list of those for a tuple output
    # False for an integer or boolean tensor output (token ids, masks, indices): never quantized.
    float_output: bool = True
    module_path: str = ""             # where it came from in the user's model (for messages, scope filters)
    # A framework's custom operator kept whole (Sony's edge-mdt-cl NMS / box decoding layers): neither it
    # nor the tensors it returns are quantized; the pipeline runs it as it is.
    opaque: bool = False
    # Quantization, filled by the pipeline.
    opset: Optional[str] = None       # the TPC operator set it belongs to (None: TPC defaults)
    candidates: list = field(default_factory=list)   # NodeQuantizationConfig options
    final_config: Any = None          # the chosen NodeQuantizationConfig
    fused_into: Optional[str] = None  # name of the node whose output ends the fused group, if inside one

    def set_weight(self, key: WeightKey, value: np.ndarray) -> None:
        self.weights[key] = np.asarray(value)

    def __repr__(self) -> str:
        t = getattr(self.type, "__name__", self.type)
        return f"Node({self.name!r}, {self.kind}, {t}, inputs={self.inputs})"


class Graph:
    """Nodes in topological order, the model's inputs, and its output structure.

    `outputs` is a (possibly nested) structure of node names in the shape the model returns them
    (a single name, a tuple / list / dict of names).
    """

    def __init__(self, nodes: Sequence[Node], outputs: Any, name: str = "model"):
        self.name = name
        self._nodes: Dict[str, Node] = {}
        for n in nodes:
            if n.name in self._nodes:
                raise ValueError(f"duplicate node name '{n.name}'")
            self._nodes[n.name] = n
        self.outputs = outputs
        self._check()

    # ---- access --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        return iter(list(self._nodes.values()))

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: str) -> bool:
        return name in self._nodes

    def node(self, name: str) -> Node:
        return self._nodes[name]

    @property
    def input_nodes(self) -> List[Node]:
        return [n for n in self._nodes.values() if n.kind == NodeKind.INPUT]

    def output_names(self) -> List[str]:
        names: List[str] = []
        map_structure(self.outputs, names.append)
        return names

    def successors(self, node: Union[Node, str]) -> List[Node]:
        name = self._resolve(node).name
        return [n for n in self._nodes.values() if name in n.inputs]

    def is_output(self, node: Union[Node, str]) -> bool:
        return self._resolve(node).name in self.output_names()

    # ---- editing -------------------------------------------------------------------------------
    def remove_node(self, node: Union[Node, str], replace_with: Optional[str] = None) -> None:
        """Remove a node; its users (and the model outputs) read `replace_with` instead (default:
        the node's single input). Used to drop folded batch-norms, identities, dropouts."""
        node = self._resolve(node)
        if replace_with is None:
            if len(node.inputs) != 1:
                raise ValueError(f"cannot bypass node '{node.name}' with {len(node.inputs)} inputs")
            replace_with = node.inputs[0]
        self.replace_uses(node.name, replace_with)
        del self._nodes[node.name]

    def replace_uses(self, old: str, new: str) -> None:
        for n in self._nodes.values():
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = map_structure(self.outputs, lambda x: new if x == old else x)

    def insert_after(self, anchor: Union[Node, str], node: Node) -> None:
        """Insert `node` (whose single input must be `anchor`) and move the anchor's users to it."""
        anchor = self._resolve(anchor)
        if node.inputs != [anchor.name]:
            raise ValueError("insert_after: the new node must take exactly the anchor as input")
        self.replace_uses(anchor.name, node.name)  # (before `node` is in the graph: it still reads the anchor)
        items = list(self._nodes.items())
        pos = [k for k, _ in items].index(anchor.name) + 1
        items.insert(pos, (node.name, node))
        self._nodes = dict(items)

    def rename_node(self, node: Union[Node, str], base: str, keyed: Optional[dict] = None) -> str:
        """Give a node a new name (``base``, made unique), keeping its place; its users, the model
        outputs and its entry in ``keyed`` (a dict by node name) follow. Returns the name."""
        node = self._resolve(node)
        new = self.unique_name(base)
        old = node.name
        self.replace_uses(old, new)
        node.name = new
        self._nodes = {(new if k == old else k): v for k, v in self._nodes.items()}
        if keyed is not None and old in keyed:
            keyed[new] = keyed.pop(old)
        return new

    def unique_name(self, base: str) -> str:
        return unique_name(base, self._nodes)

    # ---- checks --------------------------------------------------------------------------------
    def _resolve(self, node: Union[Node, str]) -> Node:
        return self._nodes[node] if isinstance(node, str) else node

    def _check(self) -> None:
        seen = set()
        for n in self._nodes.values():
            missing = [i for i in n.inputs if i not in seen]
            if missing:
                raise ValueError(f"node '{n.name}' reads {missing} before they are computed (graph not in topological order)")
            seen.add(n.name)
        unknown = [o for o in self.output_names() if o not in self._nodes]
        if unknown:
            raise ValueError(f"graph outputs name unknown nodes {unknown}")

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self)} nodes, inputs={[n.name for n in self.input_nodes]})"


def unique_name(base: str, taken: Container[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... : the first not in `taken`."""
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def map_nested(structure: Any, fn: Callable[[Any], Any]) -> Any:
    """`structure` with every item that is not a dict, list, tuple (a named tuple is an item) or slice
    replaced by fn(item), at any depth; slices hold bounds computed from tensor sizes (x[..., a:b])."""
    if isinstance(structure, dict):
        return {k: map_nested(v, fn) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)) and not hasattr(structure, "_fields"):
        return type(structure)(map_nested(v, fn) for v in structure)
    if isinstance(structure, slice):
        return slice(*(map_nested(v, fn) for v in (structure.start, structure.stop, structure.step)))
    return fn(structure)


def map_structure(structure: Any, fn: Callable[[str], Any]) -> Any:
    """The output structure with every node name replaced by fn(name)."""
    return map_nested(structure, lambda x: fn(x) if isinstance(x, str) else x)


def map_input_refs(structure: Any, fn: Callable[[InputRef], Any]) -> Any:
    """Replace every InputRef in a call-argument structure by fn(ref) (used by the builders)."""
    return map_nested(structure, lambda x: fn(x) if isinstance(x, InputRef) else x)
