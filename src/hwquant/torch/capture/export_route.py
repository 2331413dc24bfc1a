"""Capture through torch.export, for models torch.fx cannot trace symbolically (for example Python
control flow on tensor shapes: torch.export specialises it on the representative inputs).

torch.export records ATen operators. Runs of operators that come from one standard `torch.nn` layer
(`nn_module_stack` tells) are turned back into that layer, so convolutions, linear layers and
batch-norms keep their weights and attach to the TPC like traced layers; the remaining operators stay
ATen calls, attached through their overloads (see attach.py) with their schema argument names as
attributes for layer filters.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils._pytree import tree_unflatten

from hwquant.core.graph.model_graph import Graph
from hwquant.torch.capture.functional_layers import functional_calls_to_layers
from hwquant.torch.capture.fx_graph import call_arguments, fresh_name, graph_from_fx, replace_nodes


def _leaf_layer(node: fx.Node, model: torch.nn.Module) -> Optional[Tuple[str, torch.nn.Module]]:
    """(path, layer) of the standard torch.nn layer an operator comes from, if any."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path, cls = list(stack.values())[-1]
    if not isinstance(cls, str) or not cls.startswith("torch.nn.modules.") or cls.startswith("torch.nn.modules.container"):
        return None
    try:
        return path, model.get_submodule(path)
    except AttributeError:
        return None


def _layer_groups(gm: fx.GraphModule, model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module, List[fx.Node]]]:
    """Consecutive operator nodes coming from the same standard layer."""
    groups: List[Tuple[str, torch.nn.Module, List[fx.Node]]] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        leaf = _leaf_layer(node, model)
        if leaf is None:
            continue
        if groups and groups[-1][0] == leaf[0] and groups[-1][2][-1].next is node:
            groups[-1][2].append(node)
        else:
            groups.append((leaf[0], leaf[1], [node]))
    return groups


def _collapse_group(gm: fx.GraphModule, path: str, layer: torch.nn.Module, nodes: List[fx.Node]) -> Optional[str]:
    """Replace a layer's operators by one call of the layer, when it reads one tensor and yields one;
    returns the new node's name."""
    inside = set(nodes)
    external = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in inside and a.op != "get_attr" and a not in external:
                external.append(a)
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    if len(external) != 1 or len(outputs) != 1:
        return None
    # A fresh attribute: the exported module already holds `path` as a plain holder of the parameters.
    name = fresh_name(gm, "layer_" + (path.replace(".", "_") or "root"))
    gm.add_submodule(name, layer)
    return replace_nodes(gm, outputs[0], nodes, "call_module", name, (external[0],)).name


def _schema_attrs(node: fx.Node) -> Dict[str, Any]:
    """Non-tensor arguments of an ATen call under their schema names (what layer filters read)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    values = call_arguments(node, [a.name for a in schema.arguments])
    return {k: v for k, v in values.items() if not isinstance(v, (fx.Node, torch.Tensor, list, tuple))}


def _export(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> Any:
    """torch.export with every dimension dynamic where the model allows it (Dim.AUTO): a dimension the
    forward branches on, or fixes, is specialised to the example's size, and the capture keeps that
    as a check on the quantized model's inputs (`size_ranges`)."""
    auto = torch.export.Dim.AUTO
    try:
        return torch.export.export(model, tuple(example_inputs),
                                   dynamic_shapes=tuple({d: auto for d in range(x.dim())} for x in example_inputs))
    except Exception:  # noqa: BLE001 - some models export only with every size fixed
        return torch.export.export(model, tuple(example_inputs))


def _finite_int(value: Any) -> Optional[int]:
    try:  # sympy integers convert; torch's int_oo / -int_oo do not
        return int(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def _size_ranges(placeholder: fx.Node, ranges: Dict[Any, Any]) -> Dict[int, Tuple[Optional[int], Optional[int]]]:
    """What torch.export assumed of one input's sizes: {dim: (lowest, highest)}, equal bounds for a
    fixed size, None for no bound. Lower bounds of 2 are left out: torch.export's 0/1 specialisation
    puts them on every free size, and a graph valid from 2 runs at batch 1 just as well."""
    result = {}
    for d, size in enumerate(getattr(placeholder.meta.get("val"), "shape", ())):
        expr = size.node.expr if isinstance(size, torch.SymInt) else size
        if getattr(expr, "is_number", False) or isinstance(expr, int):
            result[d] = (int(expr), int(expr))
            continue
        bounds = ranges.get(expr)
        if bounds is None:
            continue
        lo, hi = _finite_int(bounds.lower), _finite_int(bounds.upper)
        lo = lo if lo is not None and lo > 2 else None
        if lo is not None or hi is not None:
            result[d] = (lo, hi)
    return result


def capture_with_export(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], name: str) -> Graph:
    exported = _export(model, example_inputs)
    gm = exported.module()
    for node in list(gm.graph.nodes):  # drop the guard check torch.export inserts
        if node.op == "call_module" and str(node.target).startswith("_guards"):
            gm.graph.erase_node(node)
    paths = {}
    for path, layer, nodes in _layer_groups(gm, model):
        new_name = _collapse_group(gm, path, layer, nodes)
        if new_name:
            paths[new_name] = path
    functional_calls_to_layers(gm)  # what remains: functional calls on the model's own parameters
    gm.graph.eliminate_dead_code()
    gm.recompile()
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
    graph = graph_from_fx(gm, name)
    for node in gm.graph.nodes:
        if node.name not in graph:
            continue
        if node.op == "call_function":
            graph.node(node.name).framework_attr.update(_schema_attrs(node))
        elif node.op == "placeholder" and (sizes := _size_ranges(node, exported.range_constraints)):
            graph.node(node.name).framework_attr["size_ranges"] = sizes
    for node_name, path in paths.items():
        if node_name in graph:  # a layer whose output nothing reads was eliminated as dead code
            graph.node(node_name).module_path = path
    # The exported graph returns a flat tuple; restore the model's own output structure.
    graph.outputs = tree_unflatten(list(graph.output_names()), exported.call_spec.out_spec)
    return graph
