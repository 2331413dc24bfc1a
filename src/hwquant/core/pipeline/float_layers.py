"""Which layers that carry weights stay float after quantization, and why.

After PTQ every layer with float weights is either quantized (some weight attribute of its final
config is) or listed here with the reason, which the run logs once and returns to the user
(`UserInformation.float_layers`): a layer no operator set of the TPC lists, an operator set that
maps none of its weights or keeps them float, the user's own edits, a batch norm that could not be
folded; and every custom operator kept whole (Sony's NMS layers), weights or not. Nothing is left
float without a word.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List

import numpy as np

from hwquant.core.graph.model_graph import Graph, Node, NodeKind

log = logging.getLogger("hwquant.float_layers")
KEPT_WHOLE = ("a custom operator kept whole (its inputs are quantized as the layers before it quantize them; it and "
              "its outputs are not)")


def _type_name(node: Node) -> str:
    return getattr(node.type, "__name__", str(node.type))


def _float_weights(node: Node) -> List[Any]:
    """The node's floating-point weights (integer buffers such as position ids are no weights to quantize)."""
    return [k for k, w in node.weights.items() if np.issubdtype(np.asarray(w).dtype, np.floating)]


def _quantizes_weights(config: Any) -> bool:
    return config is not None and any(w.enable_weights_quantization
                                      for w in config.weights_quantization_cfg.attrs.values())


def _tpc_quantizes_weights(config: Any) -> bool:
    """Whether the TPC option a candidate came from quantizes one of the weights the candidate maps."""
    op = config.op_config
    return op is not None and any(a in op.attr_weights_configs_mapping and
                                  op.attr_weights_configs_mapping[a].enable_weights_quantization
                                  for a in config.weights_quantization_cfg.attrs)


def _reason(node: Node, adapter: Any, quantize_matrices: bool) -> str:
    weights = ", ".join(map(str, _float_weights(node)))
    if any(_quantizes_weights(c) or _tpc_quantizes_weights(c) for c in node.candidates):
        return "its weight quantization was switched off by the user (network editor or manual bit widths)"
    if node.opset is None:
        if adapter.matrix_weights(node):
            return ("the TPC lists it under no operator set and "
                    + ("its weight matrices stay float unless QuantizationConfig.quantize_recurrent_and_embedding_weights=True "
                       "gives them the TPC's FullyConnected kernel config" if not quantize_matrices
                       else "its FullyConnected operator set quantizes no kernel to lend its weight matrices"))
    if adapter.batch_norm_params(node) is not None:
        return ("a batch norm that could not be folded (its input is no convolution / linear layer that it alone "
                f"reads), and {'no operator set of the TPC' if node.opset is None else node.opset} quantizes its weights")
    if node.opset is None:
        return f"the TPC lists {_type_name(node)} under no operator set, and its default options quantize no weights"
    if any(c.weights_quantization_cfg.attrs for c in node.candidates):
        return f"the TPC's operator set {node.opset} keeps its weights float (enable_weights_quantization=False)"
    return f"the TPC's operator set {node.opset} quantizes none of its weights ({weights})"


def layers_left_float(graph: Graph, adapter: Any, quantize_matrices: bool = True) -> Dict[str, str]:
    """{node name: why it stays float} for every layer (or function with constant weights) that carries
    float weights none of which its final config quantizes, and every custom operator kept whole."""
    found: Dict[str, str] = {}
    for node in graph:
        if node.opaque:
            found[node.name] = f"{_type_name(node)}: {KEPT_WHOLE}"
            continue
        if node.kind not in (NodeKind.MODULE, NodeKind.FUNCTION) or not _float_weights(node):
            continue
        if _quantizes_weights(node.final_config):
            continue
        found[node.name] = f"{_type_name(node)}: {_reason(node, adapter, quantize_matrices)}"
    return found


def log_layers_left_float(found: Dict[str, str]) -> None:
    """One warning naming every layer left float, grouped by reason."""
    if not found:
        return
    by_reason: Dict[str, List[str]] = {}
    for name, why in found.items():
        by_reason.setdefault(why, []).append(name)
    lines = [f"  {why}: {', '.join(names)}" for why, names in by_reason.items()]
    opaque = sum(why.endswith(KEPT_WHOLE) for why in found.values())
    what = "with weights" if not opaque else "kept whole" if opaque == len(found) else "with weights or kept whole"
    log.warning("%d layer(s) %s left float (UserInformation.float_layers lists them):\n%s",
                len(found), what, "\n".join(lines))
