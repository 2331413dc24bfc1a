"""The one ordered pipeline every facade runs (PTQ; GPTQ, QAT and mixed precision start from it).

    capture (framework) -> prepare (BN folding, ReLU bound, collapsing, candidates, fusing,
    equalization, edits) -> calibrate -> select configs (mixed precision under resource targets) ->
    parameters -> corrections (input scaling, shift-negative, bias correction) -> build (framework)

Reading `run_ptq` tells the whole data flow; each stage lives in its own module.
"""
from __future__ import annotations

import copy
import logging
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np

from hwquant.core.pipeline import candidates as cand
from hwquant.core.statistics.consumer_error import consumer_value_map
from hwquant.core.pipeline.distributed import check_same_run, first_batches
from hwquant.core.pipeline.float_layers import layers_left_float, log_layers_left_float
from hwquant.core.graph.model_graph import Graph
from hwquant.core.statistics.node_parameters import collect_statistics, restore_biases, set_activation_params, set_weights_params
from hwquant.core.passes.bias_correction import apply_bias_correction, bias_correction_inputs
from hwquant.core.passes.bn_folding import fold_batch_norms
from hwquant.core.passes.channel_equalization import batch_norm_priors, equalize_activation_channels
from hwquant.core.passes.input_scaling import apply_input_scaling, check_input_scaling
from hwquant.core.passes.linear_collapsing import collapse_linear_layers
from hwquant.core.passes.relu_bound import bound_relus_to_power_of_2
from hwquant.core.passes.residual_collapsing import collapse_residuals
from hwquant.core.passes.shift_negative import apply_shift_negative_correction
from hwquant.core.pipeline.state import PipelineState
from hwquant.core.configuration.tpc_overrides import apply_quantization_config_overrides

log = logging.getLogger("hwquant.pipeline")


def prepare(state: PipelineState) -> None:
    """Graph transformations, then each node's candidates from the TPC and the user's edits."""
    qc, g, adapter = state.core_config.quantization_config, state.graph, state.adapter
    state.tpc = apply_quantization_config_overrides(state.tpc, qc)
    state.fqc = adapter.attach(state.tpc, qc.custom_tpc_opset_to_layer)
    # Equalization reads the batch-norms' gamma/beta, so it looks at them before they are folded.
    priors = batch_norm_priors(g, adapter) if qc.activation_channel_equalization else {}
    state.report.folded_batch_norms = fold_batch_norms(g, adapter, priors)
    if qc.relu_bound_to_power_of_2:
        state.report.relu_bound = bound_relus_to_power_of_2(g, adapter)
    if qc.linear_collapsing:
        state.report.linear_collapsed = collapse_linear_layers(g, adapter, priors)
    if qc.residual_collapsing:
        state.report.residual_collapsed = collapse_residuals(g, adapter, priors)
    cand.assign_candidates(g, state.fqc, state.core_config, adapter)
    state.fused_groups = cand.apply_fusing(g, state.fqc)
    state.report.float_layer_inputs = cand.keep_float_inputs_of_float_layers(g, adapter)
    if qc.activation_channel_equalization:
        state.report.equalized = equalize_activation_channels(g, adapter, priors)
    cand.apply_network_editor(g, state.core_config, final=False)
    state.report.unmatched_bit_widths = cand.apply_manual_bit_widths(g, state.core_config, adapter)
    cand.remove_duplicate_candidates(g)
    if qc.input_scaling:
        check_input_scaling(g, adapter)  # refuse before the long calibration pass


def observed_nodes(graph: Graph) -> List[str]:
    """Nodes whose output any candidate quantizes: they need activation statistics."""
    return [n.name for n in graph if any(c.activation_quantization_cfg.quantized for c in n.candidates)]


def calibrate(state: PipelineState, data: Iterable[List[Any]], progress: Callable = lambda it, **kw: it) -> None:
    """One streaming pass over the representative data, collecting statistics of observed nodes."""
    names = observed_nodes(state.graph)
    # Bias correction also reads the mean of some inputs that are not quantized (e.g. after a flatten).
    names += [n for n in bias_correction_inputs(state.graph, state.adapter) if n not in names]
    state.report.calibration_batches = collect_statistics(state.graph, state.adapter, state.statistics, names,
                                                          progress(data, desc="Statistics collection"))


def keep_masks_float(state: PipelineState) -> List[str]:
    """Tensors that hold masking sentinels (an attention mask of float32-minimum or -inf entries, and
    the scores it is added to) stay float: on any grid the mask would either swallow the data or stop
    masking. The softmax after them is quantized as usual. Returns their names."""
    names = [n for n, st in state.statistics.items() if st.has_sentinels]
    for name in names:
        cand.disable_activation_quantization(state.graph.node(name))
    if names:
        log.info("kept float (they hold masking values such as the float32 minimum or -inf): %s", ", ".join(names))
        state.report.kept_float_masks = names
    return names


def compute_parameters(state: PipelineState, all_candidates: bool = False) -> None:
    """Quantization parameters of the final configs (and of every candidate, for mixed precision)."""
    for node in state.graph:
        configs = list(node.candidates) if all_candidates else []
        if node.final_config is not None:
            configs.append(node.final_config)
        observed = node.name in state.statistics
        value_map = consumer_value_map(state.graph, state.adapter, node) if observed else None
        bounds = state.adapter.output_range(node) if observed else None
        for cfg in configs:
            if observed:
                set_activation_params(cfg, state.statistics[node.name], value_map, bounds)
            set_weights_params(cfg, node.weights)


def run_ptq(state: PipelineState, data: Iterable[List[Any]], progress: Callable = lambda it, **kw: it,
            keep_float_graph: bool = False) -> PipelineState:
    """Post-training quantization of `state.graph` in place: every node gets its final config with
    quantization parameters. The framework adapter then builds the model. `keep_float_graph` keeps
    the graph as it is before bias correction in `state.float_graph`. Under a multi-process run (the
    adapter's collective) every rank gets the same result, that of one process reading every rank's data."""
    collective = state.adapter.collective
    with collective.guard("quantizing"):  # (a failure here stops the other ranks with its message)
        check_same_run(collective, state.graph, state.tpc)
        return _run_ptq(state, data, progress, keep_float_graph)


def _run_ptq(state: PipelineState, data: Iterable[List[Any]], progress: Callable, keep_float_graph: bool) -> PipelineState:
    prepare(state)
    calibrate(state, data, progress)
    keep_masks_float(state)
    cand.select_base_configs(state.graph)
    if state.target is not None and state.target.is_any_restricted():
        from hwquant.core.mixed_precision.selection import select_mixed_precision  # (scipy: only when needed)
        compute_parameters(state, all_candidates=True)  # the sensitivity model quantizes with every candidate
        state.report.mixed_precision = select_mixed_precision(state.graph, state.adapter,
                                                              state.core_config.mixed_precision_config, state.target, data)
    cand.apply_network_editor(state.graph, state.core_config, final=True)
    compute_parameters(state)
    qc = state.core_config.quantization_config
    if qc.input_scaling:
        state.report.input_scale = apply_input_scaling(state.graph, state.adapter, state.statistics)
    if qc.shift_negative_activation_correction:
        state.report.shift_negative = apply_shift_negative_correction(state.graph, state.adapter, state.statistics,
                                                                      state.fqc, state.fused_groups, data)
    if keep_float_graph:  # (GPTQ: it corrects the biases again after training, its own way)
        state.float_graph = copy.deepcopy(state.graph)
        state.report.bias_corrected = apply_bias_correction(state.graph, state.adapter, state.statistics)
    else:
        state.report.bias_corrected = bias_correction_where_it_helps(state, data)
    state.report.float_layers = layers_left_float(state.graph, state.adapter, qc.quantize_recurrent_and_embedding_weights)
    log_layers_left_float(state.report.float_layers)
    return state


# Samples (whole batches) of the representative data on which bias correction is judged.
BIAS_CORRECTION_JUDGE_SAMPLES = 32


def bias_correction_where_it_helps(state: PipelineState, data: Iterable[List[Any]]) -> int:
    """Analytic bias correction, kept only if the quantized model's output is closer to the float
    model's with it than without, on the first BIAS_CORRECTION_JUDGE_SAMPLES representative samples.

    The correction ``(W - Q(W)) E[x]`` removes each layer's own mean error, assuming float inputs;
    in the quantized model the activation quantizers add mean errors of their own, which the
    uncorrected kernels' happened to offset on some nets (MTCNN O-Net, 64 held-out faces: 35.0 dB
    without, 33.9 dB with; on EfficientNet-Lite0 it is worth 4 dB). Returns the layers corrected
    (0 when it was undone); the two errors go to the report's bias_correction_error."""
    adapter = state.adapter
    before = _biases(state)
    corrected = apply_bias_correction(state.graph, adapter, state.statistics)
    if not corrected:  # (no model is built when there is nothing to judge)
        return 0
    after = _biases(state)
    with_correction = adapter.fake_quantized_model(state.graph)
    restore_biases(state.graph, adapter, before)
    reference, without = adapter.build(state.graph, quantized=False), adapter.fake_quantized_model(state.graph)
    judged = first_batches(adapter.collective, data, BIAS_CORRECTION_JUDGE_SAMPLES, "judging bias correction")
    errors = adapter.relative_output_errors(reference, [without, with_correction], judged, BIAS_CORRECTION_JUDGE_SAMPLES)
    state.report.bias_correction_error = {"without": errors[0], "with": errors[1]}
    if errors[0] < errors[1]:
        log.info("bias correction undone: the output error on the representative data is %.3g without it, %.3g "
                 "with it", errors[0], errors[1])
        state.judged_model = without
        return 0
    restore_biases(state.graph, adapter, after)
    state.judged_model = with_correction
    return corrected


def _biases(state: PipelineState) -> Dict[str, Optional[np.ndarray]]:
    """A copy of every linear layer's bias (None where it has none)."""
    adapter, out = state.adapter, {}
    for node in state.graph:
        bias_attr = adapter.bias_attr(node)
        if bias_attr is not None and adapter.kernel_attr(node) in node.weights:
            bias = node.weights.get(bias_attr)
            out[node.name] = None if bias is None else np.array(bias)
    return out
