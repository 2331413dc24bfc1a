"""Per-node quantization candidates from the TPC, then the user's edits on them.

Each node gets its operator set (through the framework attachment) and one NodeQuantizationConfig
per option of that set, the base option first. Fusing patterns turn off the activation quantizers
inside fused groups; network-editor rules and manual bit widths are applied last.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Sequence

from hwquant.constants import KERNEL_ATTR
from hwquant.core.configuration.config import CoreConfig
from hwquant.core.graph.framework_adapter import FrameworkAdapter
from hwquant.core.graph.model_graph import Graph, Node, NodeKind
from hwquant.core.passes.linear_collapsing import single_reader
from hwquant.core.graph.node_quantization_config import (ActivationQuantizationConfig, NodeQuantizationConfig,
                                                         NodeWeightsQuantizationConfig, WeightsAttrQuantizationConfig)
from hwquant.errors import InvalidConfigError
from hwquant.logger import logger
from hwquant.tpc.enums import OperatorSetNames
from hwquant.tpc.schema import AttributeQuantizationConfig, OpQuantizationConfig


def _make_candidate(node: Node, op: OpQuantizationConfig, core_config: CoreConfig, adapter: FrameworkAdapter,
                    matrix_kernel: Optional[AttributeQuantizationConfig] = None) -> NodeQuantizationConfig:
    qc = core_config.quantization_config
    activation = ActivationQuantizationConfig.from_tpc(op, qc)
    if node.kind == NodeKind.CONSTANT or not isinstance(node.output_shape, tuple) or not node.float_output \
            or node.opaque:
        # Constants stay float (simplification); a non-tensor output (a size, a tuple taken apart by
        # getitem nodes, which are quantized themselves) has nothing to quantize, nor has an integer
        # or boolean tensor (token ids, attention masks, indices: quantizing them breaks their readers),
        # nor a custom operator kept whole (boxes, scores, labels, counts its readers expect float).
        activation.enable_activation_quantization = False
    axes = adapter.kernel_axes(node)
    kernel = adapter.kernel_attr(node)
    weights = NodeWeightsQuantizationConfig(simd_size=op.simd_size, min_threshold=qc.min_threshold,
                                            weights_bias_correction=qc.weights_bias_correction,
                                            weights_second_moment_correction=qc.weights_second_moment_correction)
    for attr in node.weights:
        if attr not in op.attr_weights_configs_mapping or node.opaque:
            continue  # running statistics and other unmapped tensors are not weights to quantize
        axis = axes[0] if axes is not None and attr == kernel else None
        weights.attrs[attr] = WeightsAttrQuantizationConfig.from_tpc(op.attr_weights_configs_mapping[attr], qc, axis)
    if matrix_kernel is not None:
        for attr, axis in adapter.matrix_weights(node).items():
            if attr in node.weights and attr not in weights.attrs:
                weights.attrs[attr] = WeightsAttrQuantizationConfig.from_tpc(matrix_kernel, qc, axis)
    return NodeQuantizationConfig(activation, weights, op)


def fully_connected_kernel_config(fqc: Any) -> Optional[AttributeQuantizationConfig]:
    """The kernel config of the TPC's FullyConnected operator set (base option), if it quantizes kernels."""
    tpc = fqc.tpc
    if not tpc.is_opset_in_model(OperatorSetNames.FULLY_CONNECTED.value):
        return None
    op = tpc.get_config_options_by_operators_set(OperatorSetNames.FULLY_CONNECTED.value).base_config
    config = op.attr_weights_configs_mapping.get(KERNEL_ATTR)
    return config if config is not None and config.enable_weights_quantization else None


# A model output whose largest value lies just above a power of two would waste half its grid on the
# no-clipping threshold: it takes the power of two below when that clips its largest magnitude by at
# most this much (CRAFT's region scores peak at 1.05: threshold 1 instead of 2, +1 dB output SQNR).
OUTPUT_POT_CLIP_TOLERANCE = 0.1


def assign_candidates(graph: Graph, fqc: Any, core_config: CoreConfig, adapter: FrameworkAdapter) -> None:
    """Set every node's operator set and candidate configs (base option first)."""
    matrix_kernel = fully_connected_kernel_config(fqc) \
        if core_config.quantization_config.quantize_recurrent_and_embedding_weights else None
    for node in graph:
        if node.kind == NodeKind.INPUT:
            node.opset, qco = None, fqc.default_qco
        else:
            node.opset = fqc.opset_of(node.type, node.framework_attr)
            qco = fqc.get_qco(node.type, node.framework_attr)
        options = [qco.base_config] + [o for o in qco.quantization_configurations if o != qco.base_config]
        node.candidates = [_make_candidate(node, op, core_config, adapter, matrix_kernel if node.opset is None else None)
                           for op in options]
    for node in graph:
        producer = _tuple_producer(graph, node)
        # an output of a layer that returns several (a GRU's sequence, its state), read by something
        if producer is not None and (graph.successors(node) or graph.is_output(node)):
            node.candidates = [_make_candidate(node, c.op_config, core_config, adapter) for c in producer.candidates]
            if producer.opaque:  # (an NMS layer's boxes and scores stay as it returns them)
                disable_activation_quantization(node)
    output_method = core_config.quantization_config.output_activation_error_method
    if output_method is not None:
        for node in _output_producers(graph):
            for c in node.candidates:
                c.activation_quantization_cfg.activation_error_method = output_method
                c.activation_quantization_cfg.pot_clip_tolerance = OUTPUT_POT_CLIP_TOLERANCE


def _tuple_producer(graph: Graph, node: Node) -> Optional[Node]:
    """The layer whose tuple output `node` takes a tensor from (through nested tuples: an LSTM's (h, c)), so
    the tensor is quantized as that layer's output; None for any other node. A tuple output itself has no
    quantizer, and the item functions' operator set (GetItem) quantizes nothing."""
    if not isinstance(node.output_shape, tuple) or len(node.inputs) != 1 or node.kind != NodeKind.FUNCTION:
        return None
    source = graph.node(node.inputs[0])
    while isinstance(source.output_shape, list):
        if source.kind == NodeKind.MODULE:
            return source
        if source.kind != NodeKind.FUNCTION or len(source.inputs) != 1:
            return None
        source = graph.node(source.inputs[0])
    return None


def _output_producers(graph: Graph) -> List[Node]:
    """The nodes whose quantizer gives a model output its range: the output nodes, or, through
    operators that do not quantize (a flatten, a reshape), the node feeding them."""
    found = []
    for name in graph.output_names():
        node = graph.node(name)
        while (node.candidates and not node.candidates[0].activation_quantization_cfg.quantized
               and len(node.inputs) == 1):
            node = graph.node(node.inputs[0])
        found.append(node)
    return found


def disable_activation_quantization(node: Node) -> None:
    """No candidate of `node` quantizes its output."""
    for c in node.candidates:
        c.activation_quantization_cfg.enable_activation_quantization = False


def apply_fusing(graph: Graph, fqc: Any) -> List[List[str]]:
    """Find the TPC's fusing patterns in the graph (longest first) and disable the activation
    quantization of every node of a fused group but the last. Returns the groups found."""
    patterns = sorted(fqc.tpc.fusing_patterns or (), key=lambda f: -len(f.operator_groups))
    taken: set = set()
    groups: List[List[str]] = []
    for pattern in patterns:
        positions = pattern.member_names()
        for start in graph:
            chain = _match_chain(graph, start, positions, taken)
            if chain:
                groups.append([n.name for n in chain])
                taken.update(n.name for n in chain)
                for n in chain[:-1]:
                    n.fused_into = chain[-1].name
                    disable_activation_quantization(n)
    return groups


def _runs_in_float(node: Node, adapter: FrameworkAdapter) -> bool:
    """A layer that computes in float whatever its input grid: one with weights of which no candidate
    quantizes any and whose output is not quantized, or one no operator set of the TPC lists whose weights
    are matrices of products (an LSTM / GRU: run on the host in float arithmetic, with float weights, or
    8-bit ones where quantize_recurrent_and_embedding_weights lends them the fully-connected kernel config,
    as TFLite's dynamic-range LSTM runs them)."""
    if node.kind != NodeKind.MODULE or not node.weights or not node.candidates or node.opaque:
        return False  # (a custom operator takes its inputs as the layers before it quantize them)
    if node.opset is None and adapter.matrix_weights(node):
        return True
    return all(not c.activation_quantization_cfg.quantized
               and not any(w.enable_weights_quantization for w in c.weights_quantization_cfg.attrs.values())
               for c in node.candidates)


def keep_float_inputs_of_float_layers(graph: Graph, adapter: FrameworkAdapter) -> List[str]:
    """A tensor that only float-computing layers read stays float: its grid would simulate nothing
    the target runs in integers and only add error (a power spectrum fed to an LSTM loses most of its
    small values on any 8-bit grid: 38.3 dB output SQNR kept float, 24.3 dB quantized). Returns the names
    of those tensors."""
    names = []
    for node in graph:
        readers = graph.successors(node.name)
        if readers and all(_runs_in_float(r, adapter) for r in readers) \
                and any(c.activation_quantization_cfg.quantized for c in node.candidates):
            disable_activation_quantization(node)
            names.append(node.name)
    return names


def _match_chain(graph: Graph, start: Node, positions: Sequence[Sequence[str]], taken: set) -> Optional[List[Node]]:
    if start.name in taken or start.opset not in positions[0]:
        return None
    chain = [start]
    for names in positions[1:]:
        # The intermediate tensor must feed exactly the next op and nothing else (and not be an output).
        reader = single_reader(graph, chain[-1])
        if reader is None or reader.name in taken or reader.opset not in names:
            return None
        chain.append(reader)
    return chain


def apply_network_editor(graph: Graph, core_config: CoreConfig, final: bool) -> None:
    """Apply the debug config's edit rules to the matching nodes' candidates (or final configs)."""
    for rule in core_config.debug_config.network_editor:
        for node in graph:
            if rule.filter.match(node):
                configs = [node.final_config] if final else node.candidates
                rule.action.apply(configs, final=final)


def apply_manual_bit_widths(graph: Graph, core_config: CoreConfig, adapter: FrameworkAdapter) -> List[str]:
    """Keep only the candidates with the bit widths the user fixed (BitWidthConfig). Returns the selections
    whose filter matched no node (said in the log and a warning: MCT refuses them; hwquant goes on, as the rest
    of the configuration still holds, but the user's bit width was applied nowhere)."""
    bw = core_config.bit_width_config
    unmatched = []
    for sel in bw.manual_activation_bit_width_selection_list:
        nodes = [n for n in graph if sel.filter.match(n)]
        for node in nodes:
            # _restrict calls the predicate at once, so the loop variables cannot go stale
            _restrict(node, lambda c: c.activation_quantization_cfg.activation_n_bits == sel.bit_width,  # noqa: B023
                      f"activation bit width {sel.bit_width}")
        if not nodes:
            unmatched.append(f"activation {sel.bit_width} bits: {sel.filter!r}")
    for sel in bw.manual_weights_bit_width_selection_list:
        nodes = [n for n in graph if sel.filter.match(n)]
        for node in nodes:
            attr = adapter.kernel_attr(node) if sel.attr == KERNEL_ATTR else sel.attr
            # _restrict calls the predicate at once, so the loop variables cannot go stale
            _restrict(node, lambda c: attr in c.weights_quantization_cfg.attrs  # noqa: B023
                      and c.weights_quantization_cfg.attrs[attr].weights_n_bits == sel.bit_width,  # noqa: B023
                      f"{attr!r} weights bit width {sel.bit_width}")
        if not nodes:
            unmatched.append(f"{sel.attr!r} weights {sel.bit_width} bits: {sel.filter!r}")
    if unmatched:
        message = (f"manual bit width: {len(unmatched)} selection(s) of the BitWidthConfig matched no node of the "
                   f"model and were applied nowhere: {'; '.join(unmatched)}. The node names are the captured graph's "
                   "(the quantized model's layer names; hwquant.core.pytorch_resource_utilization_data / the "
                   "troubleshooting report list them)")
        logger.warning(message)
        warnings.warn(message, stacklevel=2)
    return unmatched


def _restrict(node: Node, keep, what: str) -> None:
    kept = [c for c in node.candidates if keep(c)]
    if not kept:
        have = sorted({str(c.bit_widths()) for c in node.candidates})
        raise InvalidConfigError(f"manual bit width: node '{node.name}' has no TPC option with {what}; "
                                 f"its options (activation bits, weight bits) are {have}")
    node.candidates = kept


def _quantization_key(c: NodeQuantizationConfig) -> tuple:
    a = c.activation_quantization_cfg
    weights = tuple(sorted((str(k), w.weights_n_bits, w.weights_quantization_method, w.weights_per_channel_threshold)
                           for k, w in c.weights_quantization_cfg.attrs.items() if w.enable_weights_quantization))
    return (a.activation_n_bits, a.activation_quantization_method) if a.quantized else None, weights


def remove_duplicate_candidates(graph: Graph) -> None:
    """Candidates that quantize alike (e.g. 8- and 16-bit activation options of a node whose activation
    a fusing pattern switched off) collapse into the first of them: the search needs each choice once."""
    for node in graph:
        kept: Dict[tuple, NodeQuantizationConfig] = {}
        for c in node.candidates:
            kept.setdefault(_quantization_key(c), c)
        node.candidates = list(kept.values())


def select_base_configs(graph: Graph) -> None:
    """Without mixed precision every node takes its first (base) candidate."""
    for node in graph:
        node.final_config = node.candidates[0].clone() if node.candidates else None
