"""The troubleshooting report, written once for every framework: measure (analysis.py), judge, measure the
most promising fixes (fixes.py), then write MCT's files, report.json, report.html and TensorBoard events
(outputs.py), all or none.

    similarity pass on the representative data (profiles of every float tensor) -> on the validation data
    -> degraded layers (MCT's thresholds) -> judged causes -> layers ordered by their own error ->
    fixes for the first ones and for the causes -> the few most promising quantized again and measured
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from hwquant.xquant.analysis import (MERGING_OPSETS, TensorProfile, XQuantInputError, chunks, detect_degraded, judge_causes,
                                     noise_at_output, output_layers, similarity_pass, weights_error)
from hwquant.xquant.backend import LayerFacts, XQuantBackend
from hwquant.xquant.config import XQuantConfig
from hwquant.xquant.fixes import Fix, global_fixes, layer_fixes, measure, pinned_core_config
from hwquant.xquant.similarity import in_db

log = logging.getLogger("hwquant.xquant")

OUTPUT_SIMILARITY_METRICS_REPR = "output_similarity_metrics_repr"
OUTPUT_SIMILARITY_METRICS_VAL = "output_similarity_metrics_val"
INTERMEDIATE_SIMILARITY_METRICS_REPR = "intermediate_similarity_metrics_repr"
INTERMEDIATE_SIMILARITY_METRICS_VAL = "intermediate_similarity_metrics_val"
# Layers whose fixes are proposed (the ones adding the most error by themselves); of those fixes and the
# causes' fixes, XQuantConfig.measure_fixes are measured.
LAYERS_WITH_FIXES = 5
HISTOGRAM_BINS = 48


class XQuantResult(dict):
    """MCT's dictionary (same keys and values), with hwquant's whole report as ``.report`` (what
    report.json holds) and the files written as ``.files``."""
    report: Dict[str, Any]
    files: List[str]


@dataclass
class RunSettings:
    """The settings of the run that made the quantized model, to quantize again with a fix."""
    core_config: Any
    tpc: Any
    target: Any
    source: str
    notes: List[str] = field(default_factory=list)


def run_report(make_backend: Callable[[RunSettings], XQuantBackend], metadata: Dict[str, Any],
               repr_dataset: Callable[[], Any], validation_dataset: Callable[[], Any], config: Any,
               troubleshoot: bool) -> Tuple["XQuantResult", Optional[Dict[str, list]]]:
    """What every framework's facade does: check the config, find the run's settings, make the framework's back
    end with them, and generate the report."""
    if not isinstance(config, XQuantConfig):
        raise XQuantInputError(f"xquant_config must be an XQuantConfig, got {type(config).__name__}")
    settings = settings_for(metadata, config)
    return generate_report(make_backend(settings), repr_dataset, validation_dataset, config, settings, metadata,
                           troubleshoot)


def settings_for(metadata: Dict[str, Any], config: XQuantConfig) -> RunSettings:
    """The settings to quantize again with: XQuantConfig's, else those the model's metadata records, else the
    defaults (said in the notes)."""
    from hwquant.core.pipeline.model_metadata import settings_of
    from hwquant.tpc.platforms import get_target_platform_capabilities
    from hwquant.tpc.serialization import load_target_platform_capabilities

    notes: List[str] = []
    if metadata:
        qc, tpc, target, notes = settings_of(metadata)
        source = "read from the quantized model"
    else:
        from hwquant.core.configuration.quantization_config import QuantizationConfig
        qc, tpc, target = QuantizationConfig(), get_target_platform_capabilities(), None
        source = "defaults"
        notes.append("the quantized model carries no hwquant settings (made by another tool?): fixes are measured with "
                     "the default settings and TPC; pass XQuantConfig(core_config=..., target_platform_capabilities=...)")
    from hwquant.core.configuration.config import CoreConfig
    core_config = config.core_config if config.core_config is not None else CoreConfig(quantization_config=qc)
    if config.core_config is not None:
        source = "given in XQuantConfig"
    if config.target_platform_capabilities is not None:
        tpc = load_target_platform_capabilities(config.target_platform_capabilities)
    if config.target_resource_utilization is not None:
        target = config.target_resource_utilization
    return RunSettings(core_config, tpc, target, source, notes)


def check_report_dir(report_dir: str) -> None:
    """Create the report folder, and refuse one that cannot be written before any long computation."""
    try:
        os.makedirs(report_dir, exist_ok=True)
    except OSError as e:
        raise XQuantInputError(f"the report folder '{report_dir}' cannot be created ({e.strerror or e}): pass "
                               "XQuantConfig(report_dir=...) a folder you can write") from e
    if not os.path.isdir(report_dir) or not os.access(report_dir, os.W_OK | os.X_OK):
        raise XQuantInputError(f"the report folder '{report_dir}' is not a writable folder: pass "
                               "XQuantConfig(report_dir=...) a folder you can write")


def _histogram(profile: TensorProfile, value_range: Optional[tuple]) -> Optional[Dict[str, Any]]:
    values = profile.values()
    if values.size == 0:
        return None
    low, high = profile.low, profile.high
    if value_range is not None:
        low, high = min(low, value_range[0]), max(high, value_range[1])
    if high <= low:
        high = low + 1e-6
    counts, edges = np.histogram(values, bins=HISTOGRAM_BINS, range=(low, high))
    return {"counts": counts.tolist(), "edges": edges.tolist()}


def _pipeline_notes(name: str, reference: Any, layer: LayerFacts, quantized_names: set,
                    metadata: Dict[str, Any]) -> List[str]:
    """What the pipeline did to a layer, from the names it gave, its bias against the float one, and the
    run's record."""
    notes = []
    float_bias = reference.node(name).weights.get("bias") if name in reference else None
    if layer.bias is not None and float_bias is not None and np.shape(float_bias) == layer.bias.shape:
        shift = float(np.max(np.abs(layer.bias - np.asarray(float_bias, np.float32))))
        if shift > 1e-6 * max(float(np.max(np.abs(float_bias))), 1e-12):
            notes.append(f"bias corrected (by up to {shift:.3g})")
    if name.endswith("_bn") or "_bn_" in name:
        notes.append("batch norm folded in")
    if "collapsed" in name:
        notes.append("collapsed with its neighbour")
    if f"{name}_shift" in quantized_names:
        notes.append("shift-negative correction after it")
    if any(n.startswith(f"{name}_pad") for n in quantized_names):
        notes.append("padding of its shifted input made explicit")
    pipeline = metadata.get("pipeline") or {}
    if name in (pipeline.get("float_layers") or {}):
        notes.append(f"left float: {pipeline['float_layers'][name]}")
    chosen = (pipeline.get("mixed_precision_bit_widths") or {}).get(name)
    if chosen is not None:  # [activation bits or None, {weight: bits}]
        a_bits, w_bits = chosen
        parts = [f"W{b}" for b in (w_bits or {}).values()] + ([f"A{a_bits}"] if a_bits is not None else [])
        notes.append(f"mixed precision chose {' '.join(parts)}")
    if name in (pipeline.get("kept_float_masks") or []):
        notes.append("kept float (masking values)")
    return notes


def generate_report(backend: XQuantBackend, repr_dataset: Callable[[], Any], validation_dataset: Callable[[], Any],
                    config: XQuantConfig, settings: RunSettings, metadata: Dict[str, Any],
                    troubleshoot: bool) -> Tuple[XQuantResult, Optional[Dict[str, list]]]:
    """The whole report; returns (MCT's similarity dictionary, MCT's troubleshoot dictionary or None)."""
    from hwquant.xquant.outputs import write_report

    if not callable(repr_dataset) or not callable(validation_dataset):
        raise XQuantInputError("repr_dataset and validation_dataset must be callables returning an iterable of batches "
                               "(MCT's convention), e.g. def repr_dataset(): yield [images]")
    check_report_dir(config.report_dir)
    timings: Dict[str, float] = {}
    start = time.perf_counter()
    layers = {layer.name: layer for layer in backend.layers()}
    if not layers:
        raise XQuantInputError("the quantized model has no quantizer (no activation holder or quantization wrapper): "
                               "pass the model hwquant's or MCT's quantization returned")
    reference = backend.reference
    compared = [n.name for n in reference if n.name in layers and n.float_output]
    missing = [name for name in layers if name not in reference]
    if len(compared) < max(1, len(layers) // 2):
        raise XQuantInputError(f"the models do not match: {len(missing)} of the quantized model's {len(layers)} layers "
                               f"are not in the float model (e.g. {missing[:5]}); pass the float model the quantized "
                               "one was made from")
    # The inputs of merging layers are profiled too (the unbalanced-concatenation judge reads their ranges).
    merging_inputs = [i for n in reference if n.opset in MERGING_OPSETS for i in n.inputs
                      if i in reference and reference.node(i).float_output]
    observed = compared + [n for n in dict.fromkeys(merging_inputs) if n not in compared]
    profiles = {name: TensorProfile() for name in observed}
    grids = {name: facts.grid() for name in compared if (facts := layers[name].activation) is not None}
    float_cache: list = []
    repr_sim = similarity_pass(backend, repr_dataset, False, observed, config, profiles, grids, float_cache)
    timings["representative data"] = time.perf_counter() - start
    t = time.perf_counter()
    val_sim = similarity_pass(backend, validation_dataset, True, observed, config)
    timings["validation data"] = time.perf_counter() - t
    for sim in (repr_sim, val_sim):  # the extra observed inputs are not MCT's layers
        sim.intermediate = {k: v for k, v in sim.intermediate.items() if k in compared}
    degraded = detect_degraded([repr_sim, val_sim], config)
    outputs = output_layers(reference, layers)
    ratio = len(degraded) / max(len(compared), 1)
    judged = ratio < config.threshold_degrade_layer_ratio
    causes = judge_causes(reference, layers, degraded, profiles, config, outputs) if judged else {}
    if not judged:
        log.warning("%d of %d layers are degraded (more than threshold_degrade_layer_ratio=%s): the causes are not "
                    "judged; the thresholds may not suit this model", len(degraded), len(compared),
                    config.threshold_degrade_layer_ratio)
    weights = {name: weights_error(reference, layers[name]) for name in layers}
    t = time.perf_counter()
    sensitivity, output_energy = _output_sensitivity(backend, compared, float_cache, settings.notes)
    timings["output sensitivity"] = time.perf_counter() - t
    noise = {name: noise_at_output(layers[name], profiles.get(name), weights[name],
                                   None if sensitivity is None else sensitivity.get(name, 0.0)) for name in compared}
    ranking = sorted(compared, key=lambda n: -noise[n])

    # fixes: for the layers adding the most error, and for the judged causes; the first ones measured
    t = time.perf_counter()
    fixes: List[Fix] = []
    for name in ranking[:LAYERS_WITH_FIXES]:
        fixes += layer_fixes(reference, layers[name], profiles.get(name), weights[name])
    candidates = global_fixes(causes, settings.core_config.quantization_config, config, layers, reference,
                              backend.framework, weights) + fixes
    order = _measure_order(candidates)
    baseline = None
    if config.measure_fixes and order:
        _, pinned = pinned_core_config(settings.core_config, layers, reference)
        if pinned:
            settings.notes.append(f"fixes are measured at the quantized model's own bit widths ({pinned} differ from "
                                  "the TPC's defaults and were pinned with BitWidthConfig when quantizing again)")
        baseline = measure(backend, None, settings.core_config, settings.tpc, layers, float_cache)
        for fix in order[:config.measure_fixes]:
            fix.measured = measure(backend, fix, settings.core_config, settings.tpc, layers, float_cache)
            fix.measured["gain_db"] = fix.measured["sqnr_db"] - baseline["sqnr_db"]
            log.info("fix measured: %s -> output SQNR %.2f dB (%+.2f dB)", fix.title, fix.measured["sqnr_db"],
                     fix.measured["gain_db"])
    candidates.sort(key=lambda f: (f.measured is None, -(f.measured or {}).get("gain_db", 0.0)))
    timings["fixes measured"] = time.perf_counter() - t

    mct_similarity = XQuantResult({
        OUTPUT_SIMILARITY_METRICS_REPR: repr_sim.output, OUTPUT_SIMILARITY_METRICS_VAL: val_sim.output,
        INTERMEDIATE_SIMILARITY_METRICS_REPR: repr_sim.intermediate,
        INTERMEDIATE_SIMILARITY_METRICS_VAL: val_sim.intermediate})
    quantized_names = set(layers)
    reference_names = {n.name for n in reference}
    rows = []
    for node in reference:
        if node.name not in layers:
            continue
        layer = layers[node.name]
        profile = profiles.get(node.name)
        value_range = layer.activation.value_range() if layer.activation else None
        row: Dict[str, Any] = {
            "name": node.name, "type": layer.layer_type, "opset": node.opset,
            "activation": None if layer.activation is None else {
                "quantizer": layer.activation.describe(), "n_bits": layer.activation.n_bits,
                "range": value_range, "params": layer.activation.params},
            "weights": {attr: {"quantizer": q.describe(), "n_bits": q.n_bits, **weights[node.name].get(attr, {})}
                        for attr, q in layer.weights.items()},
            "compared": node.name in compared, "degraded": node.name in degraded,
            "own_noise": noise.get(node.name), "rank": ranking.index(node.name) + 1 if node.name in ranking else None,
            "alone_sqnr_db": None if sensitivity is None or node.name not in noise
            else in_db(output_energy / max(noise[node.name], 1e-30)),
            "similarity_repr": repr_sim.intermediate.get(node.name), "similarity_val": val_sim.intermediate.get(node.name),
            "pipeline": _pipeline_notes(node.name, reference, layer, quantized_names, metadata),
        }
        if profile is not None and profile.count:
            row["float"] = {"min": profile.low, "max": profile.high, "mean": profile.mean, "std": profile.std,
                            "max_zscore": profile.max_zscore(),
                            "clipped_fraction": profile.clipped / max(profile.sampled, 1) if value_range else None,
                            "own_activation_sqnr_db": in_db(profile.own_error.metrics()["sqnr"])
                            if profile.own_error.n else None,
                            "histogram": _histogram(profile, value_range)}
        rows.append(row)
    not_compared = [{"name": name, "why": "added by the pipeline (not in the float model)"
                     if any(name.startswith(r) for r in reference_names) else "not in the float model"}
                    for name in missing]
    report: Dict[str, Any] = {
        "framework": backend.framework, "model": reference.name,
        "settings": {"source": settings.source, "notes": settings.notes,
                     "quantization_config": metadata.get("quantization_config"), "tpc": {
                         k: metadata.get(k) for k in ("tpc_name", "tpc_platform_type", "tpc_version")},
                     "method": metadata.get("method"), "pipeline": metadata.get("pipeline")},
        "output": {"repr": {**repr_sim.output, "sqnr_db": in_db(repr_sim.output["sqnr"]),
                            "agreement": repr_sim.agreement, "batches": repr_sim.batches},
                   "val": {**val_sim.output, "sqnr_db": in_db(val_sim.output["sqnr"]),
                           "agreement": val_sim.agreement, "batches": val_sim.batches}},
        "layers": rows, "not_compared": not_compared, "degraded": degraded,
        "causes_judged": judged, "causes": causes, "output_layers": outputs,
        "baseline": baseline, "fixes": [f.as_dict() for f in candidates],
        "resources": _resources(backend, layers, settings.target),
        "thresholds": {"threshold_quantize_error": config.threshold_quantize_error,
                       "is_detect_under_threshold_quantize_error": config.is_detect_under_threshold_quantize_error},
    }
    timings["total"] = time.perf_counter() - start
    report["timings_s"] = timings
    troubleshoot_data = causes if troubleshoot else None
    files = write_report(config, report, mct_similarity, troubleshoot_data, profiles)
    mct_similarity.report = report
    mct_similarity.files = files
    log.info("troubleshooting report written to %s (%.1f s): %d of %d layers degraded; output SQNR %.1f dB on the "
             "representative data", config.report_dir, timings["total"], len(degraded), len(compared),
             report["output"]["repr"]["sqnr_db"])
    return mct_similarity, troubleshoot_data


# Probe passes for the output's sensitivity to each layer (on the first chunk of representative data).
SENSITIVITY_PROBES = 2


def _output_sensitivity(backend: XQuantBackend, names: List[str], float_cache: list,
                        notes: List[str]) -> Tuple[Optional[Dict[str, float]], float]:
    """(the output's sensitivity to each layer's tensor, the output's energy per sample) on the first chunk
    of the representative data; (None, 0) where the back end cannot differentiate, said in ``notes``."""
    batch, float_outputs = float_cache[0]
    chunk = chunks(batch)[0]
    n = len(chunk[0])
    size = sum(int(np.prod(o.shape[1:])) * n for o in float_outputs)
    energy = float(sum(np.square(o[:n], dtype=np.float64).sum() for o in float_outputs)) / n
    probes = np.random.default_rng(0).standard_normal((SENSITIVITY_PROBES, size)).astype(np.float32)
    try:
        return backend.output_sensitivity(chunk, names, probes), energy
    except Exception as e:  # a back end without gradients (Keras on JAX): the layers' own relative error ranks them
        notes.append(f"the output's sensitivity to each layer could not be computed ({type(e).__name__}: {e}); "
                     "layers are ranked by their own relative quantization error")
        log.warning("xquant: %s", notes[-1])
        return None, 0.0


def _measure_order(fixes: List[Fix]) -> List[Fix]:
    """Which fixes to measure first: GPTQ when XQuantConfig asks for it, the deployable remedies of the judged
    causes and of the costliest layers (in their order), another error method, then the layers kept float
    (diagnoses); GPTQ not asked for is never measured (it trains)."""
    deployable = [f for f in fixes if f.deployable and f.kind not in ("gptq", "error_method")]
    gptq = [f for f in fixes if f.kind == "gptq" and f.gptq_epochs]  # asked for: measured first
    return gptq + deployable + [f for f in fixes if f.kind == "error_method"] + [f for f in fixes if not f.deployable]


def _resources(backend: XQuantBackend, layers: Dict[str, LayerFacts], target: Any) -> Dict[str, Any]:
    """The quantized model's resource figures as the mixed-precision search counts them (weights, activation and
    total memory in bytes, BOPs): each node at the candidate of its bit widths in the quantized model, beside
    the run's targets."""
    from hwquant.core.pipeline.resource_utilization import compute_resource_utilization

    def config_of(node: Any) -> Any:
        if not node.candidates:
            return None
        layer = layers.get(node.name)
        if layer is None:  # not quantized in the model
            return None
        wanted = (layer.activation.n_bits if layer.activation else None,
                  [q.n_bits for q in layer.weights.values()])
        for cfg in node.candidates:
            a_bits, w_bits = cfg.bit_widths()
            if (a_bits, list(w_bits.values())[:len(wanted[1])]) == wanted:
                return cfg
        return node.candidates[0]
    figures = compute_resource_utilization(backend.reference, config_of, backend.adapter)
    out: Dict[str, Any] = {name: getattr(figures, name) for name in type(figures).model_fields}
    if target is not None:
        out["target"] = {name: getattr(target, name) for name in type(target).model_fields
                         if math.isfinite(getattr(target, name))}
    return out
