"""Small editing helpers over an ONNX graph: constant values, producers and consumers, unique
names, and replacing one node by several in place (the node list stays topologically sorted).

The editor works on its own copies of the nodes (protobuf hands out a new wrapper on every access,
so node identity only holds on copies) and writes them back with :meth:`GraphEditor.commit`."""
from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, List, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hwquant.core.graph.model_graph import unique_name


class GraphEditor:
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.graph = model.graph
        self.nodes: List[onnx.NodeProto] = [copy.deepcopy(n) for n in self.graph.node]
        self._names = {n for node in self.nodes for n in list(node.input) + list(node.output)}
        self._names |= ({node.name for node in self.nodes} | {t.name for t in self.graph.initializer}
                        | {v.name for v in self.graph.input})

    # ---- lookups (recomputed on demand: graphs are small next to their tensors) -------------
    def initializer(self, name: str) -> Optional[onnx.TensorProto]:
        return next((t for t in self.graph.initializer if t.name == name), None)

    def producer(self, name: str) -> Optional[onnx.NodeProto]:
        return next((n for n in self.nodes if name in n.output), None)

    def consumers(self, name: str) -> List[onnx.NodeProto]:
        return [n for n in self.nodes if name in n.input]

    def is_graph_output(self, name: str) -> bool:
        return any(o.name == name for o in self.graph.output)

    def constant(self, name: str) -> Optional[np.ndarray]:
        """The value of an initializer or of a Constant node's output; None for a computed tensor."""
        init = self.initializer(name)
        if init is not None:
            return numpy_helper.to_array(init)
        node = self.producer(name)
        if node is not None and node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    # ---- edits ------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name = unique_name(base, self._names)
        self._names.add(name)
        return name

    def add_initializer(self, array: np.ndarray, base: str, name: Optional[str] = None) -> str:
        name = name or self.fresh(base)
        self._names.add(name)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: Iterable[str], outputs: Iterable[str], domain: str = "", **attrs) -> onnx.NodeProto:
        return helper.make_node(op, list(inputs), list(outputs), name=self.fresh(f"{op}"), domain=domain, **attrs)

    def _index(self, node: onnx.NodeProto) -> int:
        return next(k for k, n in enumerate(self.nodes) if n is node)

    def replace(self, old: onnx.NodeProto, new: List[onnx.NodeProto]) -> None:
        i = self._index(old)
        self.nodes[i:i + 1] = new

    def insert_after(self, anchor: onnx.NodeProto, new: List[onnx.NodeProto]) -> None:
        i = self._index(anchor)
        self.nodes[i + 1:i + 1] = new

    def rename_input(self, old: str, new: str, nodes: Iterable[onnx.NodeProto]) -> None:
        for n in nodes:
            for k, name in enumerate(n.input):
                if name == old:
                    n.input[k] = new

    def commit(self) -> None:
        """Write the nodes back, dropping initializers and Constant nodes nothing reads any more."""
        used = {n for node in self.nodes for n in node.input} | {o.name for o in self.graph.output}
        keep = [t for t in self.graph.initializer if t.name in used]
        if len(keep) != len(self.graph.initializer):
            del self.graph.initializer[:]
            self.graph.initializer.extend(keep)
        self.nodes = [n for n in self.nodes if not (n.op_type == "Constant" and n.output[0] not in used)]
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)


def opset_of(model: onnx.ModelProto, domain: str = "") -> int:
    return next((o.version for o in model.opset_import if o.domain in (domain, "ai.onnx" if not domain else domain)), 0)


def set_domain(model: onnx.ModelProto, domain: str, version: Optional[int]) -> None:
    """Declare (version) or remove (None) a custom domain in the model's opset imports."""
    keep = [o for o in model.opset_import if o.domain != domain]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    if version is not None:
        model.opset_import.append(helper.make_opsetid(domain, version))


def attrs_of(node: onnx.NodeProto) -> Dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}
