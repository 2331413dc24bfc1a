"""The remedies the toolkit can apply to a degraded layer, the code that applies each, and its measured
effect: the float model quantized again with the remedy, its output compared with the float model's.

Written once: the framework back end only quantizes and runs models."""
from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from hwquant.core.graph.model_graph import Graph
from hwquant.xquant.analysis import PairSums, TensorProfile, chunks, flat_output, top1_agreement
from hwquant.xquant.backend import LayerFacts, XQuantBackend
from hwquant.xquant.similarity import in_db

log = logging.getLogger("hwquant.xquant")


@dataclass
class Fix:
    """One remedy: what it changes, why it is suggested, the code that applies it, and (once measured) the
    output SQNR (dB) and top-1 agreement it gives."""
    kind: str
    title: str
    why: str
    code: str
    apply: Callable[[Any], None] = field(repr=False)  # edits a CoreConfig in place
    layer: Optional[str] = None
    deployable: bool = True
    measured: Optional[Dict[str, Any]] = None
    touches: List[str] = field(default_factory=list)  # the layers whose bit widths it sets (besides ``layer``)
    gptq_epochs: int = 0                              # > 0: measured by GPTQ with this many epochs

    def as_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "layer": self.layer, "why": self.why, "code": self.code,
                "deployable": self.deployable, "measured": self.measured}


def _filter(name: str) -> str:
    return f"mct.core.network_editor.NodeNameFilter({name!r})"


def _core_config_code(setup: str, core_args: str) -> str:
    return f"{setup}\ncore_config = mct.core.CoreConfig({core_args})  # keep your other CoreConfig arguments"


def _allowed_bits(node: Any) -> Tuple[set, Dict[str, set]]:
    """The activation and per-weight bit widths the TPC offers a node (its candidates)."""
    activation: set = set()
    weights: Dict[str, set] = {}
    for cfg in getattr(node, "candidates", []) or []:
        a_bits, w_bits = cfg.bit_widths()
        if a_bits is not None:
            activation.add(a_bits)
        for attr, bits in w_bits.items():
            weights.setdefault(str(attr), set()).add(bits)
    return activation, weights


def _set_activation_bits(name: str, bits: int) -> Callable[[Any], None]:
    def apply(core_config: Any) -> None:
        from hwquant.core.configuration.network_editor import NodeNameFilter
        core_config.bit_width_config.set_manual_activation_bit_width(NodeNameFilter(name), bits)
    return apply


def _set_kernel_bits(name: str, bits: int) -> Callable[[Any], None]:
    def apply(core_config: Any) -> None:
        from hwquant.constants import KERNEL_ATTR
        from hwquant.core.configuration.network_editor import NodeNameFilter
        core_config.bit_width_config.set_manual_weights_bit_width(NodeNameFilter(name), bits, KERNEL_ATTR)
    return apply


def _bit_width_fix(kind: str, title: str, why: str, names: Sequence[str], bits: int, kernel: bool,
                   layer: Optional[str] = None) -> Fix:
    """A fix that sets ``bits`` on these layers' activations (or kernels) with BitWidthConfig: its code (one call,
    or a loop over the names) and what applies it."""
    method = "set_manual_weights_bit_width" if kernel else "set_manual_activation_bit_width"
    attr = ", mct.target_platform_capabilities.constants.KERNEL_ATTR" if kernel else ""
    if len(names) == 1:
        body = f"bit_width_config.{method}({_filter(names[0])}, {bits}{attr})"
    else:
        listed = ",\n    ".join(repr(n) for n in names)
        body = (f"for name in [\n    {listed}]:\n    bit_width_config.{method}("
                f"mct.core.network_editor.NodeNameFilter(name), {bits}{attr})")
    setter = _set_kernel_bits if kernel else _set_activation_bits

    def apply(core_config: Any) -> None:
        for name in names:
            setter(name, bits)(core_config)
    return Fix(kind, title, why, _core_config_code("bit_width_config = mct.core.BitWidthConfig()\n" + body,
                                                   "bit_width_config=bit_width_config"),
               apply, layer, touches=list(names))


def _keep_float(name: str, activation: bool, weights: bool) -> Callable[[Any], None]:
    def apply(core_config: Any) -> None:
        from hwquant.core.configuration.network_editor import (ChangeCandidatesActivationQuantConfigAttr,
                                                               ChangeCandidatesWeightsQuantConfigAttr, EditRule, NodeNameFilter)
        rules = core_config.debug_config.network_editor
        if activation:
            rules.append(EditRule(NodeNameFilter(name),
                                  ChangeCandidatesActivationQuantConfigAttr(enable_activation_quantization=False)))
        if weights:
            rules.append(EditRule(NodeNameFilter(name),
                                  ChangeCandidatesWeightsQuantConfigAttr(enable_weights_quantization=False)))
    return apply


def _set_quantization(**change: Any) -> Callable[[Any], None]:
    def apply(core_config: Any) -> None:
        for key, value in change.items():
            setattr(core_config.quantization_config, key, value)
    return apply


def _qc_code(qc: Any, **change: Any) -> str:
    """``mct.core.QuantizationConfig(...)`` with the run's non-default settings and the change."""
    from hwquant.core.configuration.quantization_config import QuantizationConfig

    default = QuantizationConfig()
    args = {k: getattr(qc, k) for k in type(qc).model_fields
            if k != "custom_tpc_opset_to_layer" and getattr(qc, k) != getattr(default, k)}
    args.update(change)

    def literal(v: Any) -> str:
        if hasattr(v, "name") and type(v).__module__.startswith("hwquant"):
            return f"mct.core.{type(v).__name__}.{v.name}"
        return repr(v)
    return "mct.core.QuantizationConfig(" + ", ".join(f"{k}={literal(v)}" for k, v in args.items()) + ")"


def layer_fixes(reference: Graph, layer: LayerFacts, profile: Optional[TensorProfile],
                weights: Dict[str, Dict[str, Any]]) -> List[Fix]:
    """What can be done for one layer, most useful first: more bits where its own error is largest and the
    TPC allows them (deployable); else keeping it float (a diagnosis: it tells what the layer costs, but an
    integer-only target cannot run a float layer)."""
    node = reference.node(layer.name) if layer.name in reference else None
    a_allowed, w_allowed = _allowed_bits(node)
    act_noise = 1 / max(profile.own_error.metrics()["sqnr"], 1e-12) if profile is not None and profile.own_error.n else 0
    w_noise = sum(1 / max(e["sqnr"], 1e-12) for e in weights.values())
    fixes: List[Fix] = []
    a_bits = layer.activation.n_bits if layer.activation else None
    higher_a = sorted(b for b in a_allowed if a_bits is not None and b > a_bits)
    if higher_a:
        bits = higher_a[-1]
        fixes.append(_bit_width_fix("activation_bits", f"'{layer.name}': activation at {bits} bits (now {a_bits})",
                                    f"its own activation quantization has SQNR {in_db(1 / max(act_noise, 1e-30)):.1f} dB "
                                    f"and the TPC offers {bits} bits for this layer", [layer.name], bits, False,
                                    layer.name))
    kernel = next(iter(layer.weights.values()), None)
    kernel_allowed = next(iter(w_allowed.values()), set())
    higher_w = sorted(b for b in kernel_allowed if kernel is not None and b > kernel.n_bits)
    if higher_w and kernel is not None:
        bits = higher_w[-1]
        fixes.append(_bit_width_fix("weights_bits", f"'{layer.name}': kernel at {bits} bits (now {kernel.n_bits})",
                                    f"its kernel's quantization has SQNR {in_db(1 / max(w_noise, 1e-30)):.1f} dB and the "
                                    f"TPC offers {bits} bits", [layer.name], bits, True, layer.name))
    if w_noise > act_noise and len(fixes) == 2:
        fixes.reverse()  # the kernel's error dominates: its remedy first
    what = [w for w, on in (("activation", layer.activation is not None), ("weights", bool(layer.weights))) if on]
    rules = []
    if layer.activation is not None:
        rules.append(f"mct.core.network_editor.EditRule({_filter(layer.name)}, "
                     "mct.core.network_editor.ChangeCandidatesActivationQuantConfigAttr(enable_activation_quantization=False))")
    if layer.weights:
        rules.append(f"mct.core.network_editor.EditRule({_filter(layer.name)}, "
                     "mct.core.network_editor.ChangeCandidatesWeightsQuantConfigAttr(enable_weights_quantization=False))")
    fixes.append(Fix("keep_float", f"'{layer.name}': {' and '.join(what)} kept float",
                     "measures what this layer's quantization costs the output; a float layer does not run on an "
                     "integer-only accelerator",
                     _core_config_code("debug_config = mct.core.DebugConfig(network_editor=[\n    "
                                       + ",\n    ".join(rules) + "])", "debug_config=debug_config"),
                     _keep_float(layer.name, layer.activation is not None, bool(layer.weights)), layer.name,
                     deployable=False))
    return fixes


def wider_kernels(layers: Dict[str, LayerFacts], reference: Graph, weights: Dict[str, Dict[str, Dict[str, Any]]]) \
        -> Optional[Fix]:
    """More kernel bits for the layers whose kernels lose most (a tenth of the narrower ones, at least two):
    where the error is spread over many narrow kernels, no single layer's fix shows it; a manual mixed
    precision does. Its cost in weights memory is said."""
    narrow = []
    for name, layer in layers.items():
        kernel = next(iter(layer.weights.values()), None)
        allowed = next(iter(_allowed_bits(reference.node(name))[1].values()), set()) if name in reference else set()
        entry = next(iter(weights.get(name, {}).values()), None)
        if kernel is not None and entry is not None and allowed and max(allowed) > kernel.n_bits:
            narrow.append((1 / max(entry["sqnr"], 1e-12), name, kernel.n_bits, max(allowed)))
    if len(narrow) < 4:
        return None
    chosen = sorted(narrow, reverse=True)[:max(2, math.ceil(len(narrow) / 10))]
    bits = min(c[3] for c in chosen)
    names = [c[1] for c in chosen]
    extra = sum(np.size(next(iter(reference.node(n).weights.values()))) * (bits - b) / 8 for _, n, b, _ in chosen)
    return _bit_width_fix("weights_bits_many", f"kernels at {bits} bits in the {len(names)} layers whose kernels lose most",
                          f"{len(narrow)} kernels are narrower than the TPC allows; these {len(names)} lose most to it "
                          f"(about {extra / 1024:.1f} KiB more weights memory)", names, bits, True)


def global_fixes(causes: Dict[str, list], qc: Any, config: Any, layers: Dict[str, LayerFacts],
                 reference: Graph, framework: str, weights: Dict[str, Dict[str, Dict[str, Any]]]) -> List[Fix]:
    """Remedies of the judged causes, for the whole model."""
    fixes: List[Fix] = []
    many = wider_kernels(layers, reference, weights)
    if many is not None:
        fixes.append(many)
    if causes.get("outlier_removal") and not math.isfinite(qc.z_threshold):
        z = config.threshold_zscore_outlier_removal
        names = ", ".join(f"'{n}'" for n, _ in causes["outlier_removal"][:3])
        fixes.append(Fix("z_threshold", f"z-score outlier removal (z_threshold={z})",
                         f"{names} hold values more than {z} standard deviations from their mean: the range chosen "
                         "for them spends its levels on a few outliers",
                         _core_config_code("", f"quantization_config={_qc_code(qc, z_threshold=z)}").lstrip(),
                         _set_quantization(z_threshold=z)))
    if causes.get("shift_negative_activation") and not qc.shift_negative_activation_correction:
        names = ", ".join(f"'{n}'" for n in causes["shift_negative_activation"][:3])
        fixes.append(Fix("shift_negative", "shift-negative correction",
                         f"{names} output negative values that an unsigned grid after them would lose",
                         _core_config_code("", "quantization_config="
                                           + _qc_code(qc, shift_negative_activation_correction=True)).lstrip(),
                         _set_quantization(shift_negative_activation_correction=True)))
    for name in causes.get("mixed_precision_with_model_output_loss_objective", []):
        node = reference.node(name) if name in reference else None
        a_allowed, _ = _allowed_bits(node)
        layer = layers[name]
        if layer.activation is not None and a_allowed and max(a_allowed) > layer.activation.n_bits:
            bits = max(a_allowed)
            fixes.append(_bit_width_fix("output_bits", f"output layer '{name}' at {bits} bits",
                                        f"the output layer has {layer.activation.n_bits}-bit activations", [name], bits,
                                        False, name))
    now = {name: layer.activation.n_bits for name, layer in layers.items()
           if layer.activation is not None and name in reference}
    widest = {name: max(_allowed_bits(reference.node(name))[0], default=0) for name in now}
    top = max(widest.values(), default=0)
    wider = [name for name, bits in widest.items() if bits == top and bits > now[name]]
    if wider:
        fixes.append(_bit_width_fix("activations_16bit",
                                    f"{top}-bit activations wherever the TPC allows them ({len(wider)} layers)",
                                    f"the TPC offers wider activations for {len(wider)} layer(s) ({', '.join(wider[:3])}"
                                    f"{', ...' if len(wider) > 3 else ''}): the upper bound of what wider activations "
                                    "give", wider, top, False))
    from hwquant.core.configuration.error_methods import QuantizationErrorMethod
    alternative = QuantizationErrorMethod.NOCLIPPING if qc.activation_error_method != QuantizationErrorMethod.NOCLIPPING \
        else QuantizationErrorMethod.MSE
    fixes.append(Fix("error_method", f"activation ranges by {alternative.name} (now {qc.activation_error_method.name})",
                     "another way of choosing activation ranges: keeps or clips the largest values differently",
                     _core_config_code("", "quantization_config="
                                       + _qc_code(qc, activation_error_method=alternative)).lstrip(),
                     _set_quantization(activation_error_method=alternative)))
    low_bits = [n for n, layer in layers.items() if any(q.n_bits <= 4 for q in layer.weights.values())]
    if low_bits:
        gptq = "get_pytorch_gptq_config" if framework == "pytorch" else "get_keras_gptq_config"
        facade = ("pytorch_gradient_post_training_quantization" if framework == "pytorch"
                  else "keras_gradient_post_training_quantization")
        fixes.append(Fix("gptq", "GPTQ (weights trained against the float model's outputs"
                         + (f", {config.measure_gptq_epochs} epochs measured)" if config.measure_gptq_epochs else ")"),
                         f"{len(low_bits)} layer(s) have kernels of 4 bits or fewer, whose rounding GPTQ learns",
                         f"gptq_config = mct.gptq.{gptq}(n_epochs={config.measure_gptq_epochs or 5})\n"
                         f"quantized_model, info = mct.gptq.{facade}(\n"
                         "    float_model, representative_data_gen, gptq_config=gptq_config, core_config=core_config,\n"
                         "    target_platform_capabilities=tpc)",
                         lambda core_config: None, gptq_epochs=config.measure_gptq_epochs))
    return fixes


def pinned_core_config(core_config: Any, layers: Dict[str, LayerFacts], reference: Graph,
                       exclude: Sequence[str] = ()) -> Tuple[Any, int]:
    """A copy of ``core_config`` whose manual bit widths give every layer (but ``exclude``) the bit widths
    it has in the quantized model, where they differ from the TPC's default for it: quantizing again then
    reproduces the model's precision (a mixed-precision choice, the user's own bit widths) without the
    settings that led to it. Returns (config, layers pinned)."""
    from hwquant.constants import KERNEL_ATTR
    from hwquant.core.configuration.network_editor import NodeNameFilter

    cfg = copy.deepcopy(core_config)
    pinned = 0
    for name, layer in layers.items():
        node = reference.node(name) if name in reference else None
        if name in exclude or node is None or not node.candidates:
            continue
        a_base, w_base = node.candidates[0].bit_widths()
        a_allowed, w_allowed = _allowed_bits(node)
        if layer.activation is not None and a_base is not None and layer.activation.n_bits != a_base \
                and layer.activation.n_bits in a_allowed:
            cfg.bit_width_config.set_manual_activation_bit_width(NodeNameFilter(name), layer.activation.n_bits)
            pinned += 1
        kernel = next(iter(layer.weights.values()), None)
        base_bits = next(iter(w_base.values()), None)
        if kernel is not None and base_bits is not None and kernel.n_bits != base_bits \
                and kernel.n_bits in next(iter(w_allowed.values()), set()):
            cfg.bit_width_config.set_manual_weights_bit_width(NodeNameFilter(name), kernel.n_bits, KERNEL_ATTR)
            pinned += 1
    return cfg, pinned


def measure(backend: XQuantBackend, fix: Optional[Fix], core_config: Any, tpc: Any, layers: Dict[str, LayerFacts],
            float_cache: Sequence[Tuple[List[Any], List[np.ndarray]]]) -> Dict[str, Any]:
    """The float model quantized again at the quantized model's bit widths (``pinned_core_config``) with
    ``fix`` applied (None: none), and its outputs on the cached representative batches against the float
    model's."""
    touched = [] if fix is None else [*fix.touches, *([fix.layer] if fix.layer else [])]
    cfg, _ = pinned_core_config(core_config, layers, backend.reference, touched)
    if fix is not None:
        fix.apply(cfg)
    # the quantization's own warnings (a layer the fix keeps float is "left float") are about this trial, not the
    # user's model: the report states each fix's effect instead
    package = logging.getLogger("hwquant")
    level = package.level
    package.setLevel(logging.ERROR)
    try:
        model = backend.quantize_gptq(cfg, tpc, fix.gptq_epochs) if fix is not None and fix.gptq_epochs \
            else backend.quantize(cfg, tpc, None)
    finally:
        package.setLevel(level)
    sums, agree = PairSums(), [0, 0]
    for batch, float_outputs in float_cache:
        outs = [backend.outputs(model, chunk) for chunk in chunks(batch)]
        quantized = [np.concatenate(parts) for parts in zip(*outs)]
        sums.add(flat_output(float_outputs), flat_output(quantized))
        a = top1_agreement(float_outputs, quantized)
        if a is not None:
            agree[0] += a[0]
            agree[1] += a[1]
    return {"sqnr_db": in_db(sums.metrics()["sqnr"]), "agreement": agree[0] / agree[1] if agree[1] else None}
