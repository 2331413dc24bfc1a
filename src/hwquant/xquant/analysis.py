"""The measurements of the report, framework-free: one pass over each dataset through the float model,
its reference (the float model prepared as for quantization) and the quantized model; what each layer
does to the signal; MCT's detection of degraded layers and its four judged causes."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from hwquant.core.numerics import quant_math
from hwquant.core.graph.model_graph import Graph
from hwquant.errors import HwquantError
from hwquant.tpc.enums import OperatorSetNames
from hwquant.xquant.backend import BatchRun, LayerFacts, XQuantBackend, per_tensor_range
from hwquant.xquant.config import XQuantConfig
from hwquant.xquant.similarity import Averages, compare, in_db

log = logging.getLogger("hwquant.xquant")

# Samples per chunk run at once: every observed tensor of a chunk is held in memory together.
CHUNK = 8
# Values of each float tensor kept for its histogram and z-score (a random subsample per chunk).
SAMPLE_PER_CHUNK, SAMPLE_SIZE = 2048, 32768
# Values per chunk on which the clipped fraction and a tensor's own quantization error are measured.
SUBSAMPLE_PER_CHUNK = 65536
# Operator sets whose float output has a negative part that an unsigned grid would lose (MCT's list:
# PReLU, ELU, Hardswish, SiLU, GELU); shift-negative correction moves it onto the grid.
NEGATIVE_ACTIVATIONS = tuple(o.value for o in (OperatorSetNames.PRELU, OperatorSetNames.ELU, OperatorSetNames.HARDSWISH,
                                               OperatorSetNames.SWISH, OperatorSetNames.GELU))
MERGING_OPSETS = (OperatorSetNames.CONCATENATE.value, OperatorSetNames.ADD.value)


class XQuantInputError(HwquantError):
    """The models or the data given to the report cannot be compared."""


@dataclass
class PairSums:
    """Sums over a tensor pair (float x, quantized y) from which MSE, cosine similarity and SQNR follow
    exactly however the batch was split into chunks."""
    n: int = 0
    xx: float = 0.0
    yy: float = 0.0
    xy: float = 0.0
    dd: float = 0.0

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        # float32 products summed by BLAS: a relative error near 1e-6 on these sums, at a fraction of
        # float64's time on the largest activations
        x, y = np.ravel(x).astype(np.float32, copy=False), np.ravel(y).astype(np.float32, copy=False)
        d = x - y
        self.n += x.size
        self.xx += float(np.dot(x, x))
        self.yy += float(np.dot(y, y))
        self.xy += float(np.dot(x, y))
        self.dd += float(np.dot(d, d))

    def metrics(self) -> Dict[str, float]:
        mse = self.dd / max(self.n, 1)
        # two all-zero tensors are the same tensor (MCT's torch formula would call them unrelated: 0)
        cs = 1.0 if self.xx == 0 and self.yy == 0 else self.xy / max(math.sqrt(self.xx * self.yy), 1e-8)
        sqnr = math.inf if self.dd == 0 else (self.xx / max(self.n, 1)) / mse
        return {"mse": mse, "cs": cs, "sqnr": sqnr}


@dataclass
class TensorProfile:
    """A float tensor at one node over the representative data: exact moments and extremes; on a random
    subsample, its histogram, how much of it the quantizer's range clips, and the error of quantizing it
    alone (the layer's own activation error, before any error from upstream)."""
    count: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    clipped: int = 0
    sampled: int = 0
    sample: List[np.ndarray] = field(default_factory=list)
    own_error: PairSums = field(default_factory=PairSums)

    def add(self, x: np.ndarray, value_range: Optional[tuple], grid: Any, rng: np.random.Generator) -> None:
        flat = np.ravel(x).astype(np.float32, copy=False)
        if flat.size == 0:
            return
        self.count += flat.size
        self.total += float(flat.sum())  # numpy sums float32 pairwise: accurate, and far faster than float64
        self.total_sq += float(np.dot(flat, flat))
        self.low, self.high = min(self.low, float(flat.min())), max(self.high, float(flat.max()))
        # The clipped fraction, the histogram and the tensor's own quantization error are read on a random
        # subsample: exact enough for what they tell, and the full tensor would cost most of the report's time.
        take = min(SUBSAMPLE_PER_CHUNK, flat.size)
        part = flat[rng.integers(0, flat.size, take)] if take < flat.size else flat
        self.sampled += part.size
        if value_range is not None:
            self.clipped += int(np.count_nonzero((part < value_range[0]) | (part > value_range[1])))
        if sum(s.size for s in self.sample) < SAMPLE_SIZE:
            self.sample.append(part[:SAMPLE_PER_CHUNK])
        if grid is not None:
            self.own_error.add(part, np.asarray(quant_math.fake_quantize(part, grid)))

    @property
    def mean(self) -> float:
        return self.total / max(self.count, 1)

    @property
    def std(self) -> float:
        return math.sqrt(max(self.total_sq / max(self.count, 1) - self.mean ** 2, 0.0))

    def max_zscore(self) -> float:
        """How many standard deviations the farthest value lies from the mean (MCT's outlier test)."""
        if self.count == 0 or self.std == 0:
            return 0.0
        return max(abs(self.high - self.mean), abs(self.low - self.mean)) / self.std

    def values(self) -> np.ndarray:
        return np.concatenate(self.sample) if self.sample else np.zeros(0)


@dataclass
class DatasetSimilarity:
    """MCT's two dictionaries for one dataset, plus the output's top-1 agreement where the output is scores."""
    output: Dict[str, float]
    intermediate: Dict[str, Dict[str, float]]
    agreement: Optional[float]
    batches: int


def flat_output(outputs: List[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(o, np.float64).ravel() for o in outputs]) if outputs else np.zeros(0)


def top1_agreement(float_outputs: List[np.ndarray], quantized_outputs: List[np.ndarray]) -> Optional[Tuple[int, int]]:
    """(samples whose arg-max class agrees, samples) over the outputs that are class scores (rank >= 2, at
    least two classes in the last axis); None when no output is."""
    agree = total = 0
    for f, q in zip(float_outputs, quantized_outputs):
        if f.ndim >= 2 and f.shape[-1] >= 2:
            a, b = f.argmax(-1), q.argmax(-1)
            agree += int(np.count_nonzero(a == b))
            total += a.size
    return (agree, total) if total else None


def check_outputs(run: BatchRun) -> None:
    shapes_f = [tuple(o.shape) for o in run.float_outputs]
    shapes_q = [tuple(o.shape) for o in run.quantized_outputs]
    if shapes_f != shapes_q:
        raise XQuantInputError(f"the models do not match: the float model returns outputs of shapes {shapes_f}, the "
                               f"quantized model {shapes_q}; pass the float model the quantized one was made from")


# The reference (the float model prepared as for quantization) must give the float model's outputs: it
# stands for the float model in the comparisons. Folding changes only rounding: far above this.
REFERENCE_MIN_SQNR_DB = 40.0


def check_reference(reference_outputs: List[np.ndarray], float_outputs: List[np.ndarray]) -> None:
    """Refuse to report when the prepared float model does not compute what the float model does (a capture
    defect would otherwise be reported as quantization error)."""
    if [o.shape for o in reference_outputs] != [o.shape for o in float_outputs]:
        raise XQuantInputError(f"the float model's outputs {[o.shape for o in float_outputs]} and its captured graph's "
                               f"{[o.shape for o in reference_outputs]} differ: please report this model")
    sums = PairSums()
    sums.add(flat_output(float_outputs), flat_output(reference_outputs))
    db = in_db(sums.metrics()["sqnr"])
    if db < REFERENCE_MIN_SQNR_DB:
        raise XQuantInputError(f"the float model's captured graph computes outputs {db:.1f} dB from the float model's "
                               f"own (at least {REFERENCE_MIN_SQNR_DB:.0f} dB expected): the report would be wrong; "
                               "please report this model")


def model_inputs(item: Any, validation: bool) -> List[Any]:
    """A dataset's item as the model's list of inputs: MCT's representative data yields the inputs (a list, or
    one array), its validation data (inputs, labels)."""
    if validation:
        if not isinstance(item, (list, tuple)) or not item:
            raise XQuantInputError(f"validation_dataset must yield (inputs, labels) pairs, as MCT's does; got "
                                   f"{type(item).__name__}")
        item = item[0]
    return list(item) if isinstance(item, (list, tuple)) else [item]


def chunks(batch: List[Any]) -> List[List[Any]]:
    n = len(batch[0])
    return [[a[s:s + CHUNK] for a in batch] for s in range(0, n, CHUNK)] if n > CHUNK else [batch]


def similarity_pass(backend: XQuantBackend, dataset: Callable[[], Any], validation: bool, names: Sequence[str],
                    config: XQuantConfig, profiles: Optional[Dict[str, TensorProfile]] = None,
                    grids: Optional[Dict[str, Any]] = None, float_cache: Optional[list] = None) -> DatasetSimilarity:
    """MCT's similarity figures of one dataset (per batch, averaged over batches; a batch larger than CHUNK
    runs in chunks whose sums give the batch's figures exactly; custom metrics are averaged over chunks).
    With ``profiles``, each node's float tensor is profiled; with ``float_cache``, (batch, float outputs)
    pairs are kept to measure fixes against."""
    custom = dict(config.custom_similarity_metrics or {})
    grids = grids or {}
    rng = np.random.default_rng(0)
    outputs, layers, agreement = Averages(), Averages(), [0, 0]
    batches = 0
    for batch in backend.batches(dataset, validation):
        if config.max_batches is not None and batches >= config.max_batches:
            break
        out_sums, layer_sums = PairSums(), {name: PairSums() for name in names}
        out_custom, layer_custom = Averages(), Averages()
        float_outs: List[List[np.ndarray]] = []
        for chunk in chunks(batch):
            run = backend.run(chunk, names)
            check_outputs(run)
            f, q = flat_output(run.float_outputs), flat_output(run.quantized_outputs)
            out_sums.add(f, q)
            if custom:
                out_custom.add("out", compare(f, q, custom, backend.native))
            agree = top1_agreement(run.float_outputs, run.quantized_outputs)
            if agree is not None:
                agreement[0] += agree[0]
                agreement[1] += agree[1]
            for name in names:
                x, y = run.float_tensors[name], run.quantized_tensors[name]
                if x.shape != y.shape:
                    raise XQuantInputError(f"the models do not match at layer '{name}': the float model's tensor has "
                                           f"shape {x.shape}, the quantized model's {y.shape}")
                layer_sums[name].add(x, y)
                if custom:
                    layer_custom.add(name, compare(x, y, custom, backend.native))
                if profiles is not None and name in profiles:
                    grid = grids.get(name)
                    profiles[name].add(x, None if grid is None else per_tensor_range(grid), grid, rng)
            float_outs.append(run.float_outputs)
        outputs.add("out", {**out_sums.metrics(), **out_custom.means().get("out", {})})
        for name in names:
            layers.add(name, {**layer_sums[name].metrics(), **layer_custom.means().get(name, {})})
        if float_cache is not None:
            float_cache.append((batch, [np.concatenate(parts) for parts in zip(*float_outs)]))
        batches += 1
    if batches == 0:
        which = "validation_dataset" if validation else "repr_dataset"
        raise XQuantInputError(f"the {which} yielded no batch: it must be a callable returning an iterable of "
                               "batches" + (" of (inputs, labels)" if validation else " (a list of input arrays each)"))
    means = layers.means()
    return DatasetSimilarity(outputs.means()["out"], {name: means[name] for name in names},
                             agreement[0] / agreement[1] if agreement[1] else None, batches)


def weights_error(reference: Graph, layer: LayerFacts) -> Dict[str, Dict[str, float]]:
    """Per quantized weight: its own quantization error (SQNR of the float weight against its quantized
    values, ratio) and its per-output-channel float ranges."""
    out: Dict[str, Dict[str, Any]] = {}
    node = reference.node(layer.name) if layer.name in reference else None
    for attr, facts in layer.weights.items():
        w = None if node is None else node.weights.get(attr)
        if w is None:
            continue
        w = np.asarray(w, np.float32)
        try:
            wq = np.asarray(quant_math.fake_quantize(w, facts.grid()))
        except (ValueError, IndexError):  # a layout the quantizer does not read this way: no figure
            continue
        sums = PairSums()
        sums.add(w, wq)
        entry: Dict[str, Any] = {"sqnr": sums.metrics()["sqnr"]}
        axis = facts.channel_axis
        if axis is not None and w.ndim > 0:
            moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
            entry["channel_min"], entry["channel_max"] = moved.min(1).tolist(), moved.max(1).tolist()
        out[attr] = entry
    return out


def detect_degraded(similarities: Sequence[DatasetSimilarity], config: XQuantConfig) -> List[str]:
    """MCT's rule: a layer is degraded when, on either dataset, any metric with a threshold crosses it
    (below it for metrics flagged 'detect under', above it otherwise). Metrics without a threshold are
    skipped, said once."""
    degraded: List[str] = []
    metrics = list(similarities[0].output) if similarities else []
    for metric in metrics:
        if metric not in config.threshold_quantize_error:
            log.warning("XQuantConfig.threshold_quantize_error has no entry for '%s': layers are not judged by it",
                        metric)
            continue
        threshold = config.threshold_quantize_error[metric]
        under = config.is_detect_under_threshold_quantize_error.get(metric, False)
        for sim in similarities:
            for name, values in sim.intermediate.items():
                value = values[metric]
                if (value <= threshold if under else value >= threshold) and name not in degraded:
                    degraded.append(name)
    return degraded


def judge_causes(reference: Graph, layers: Dict[str, LayerFacts], degraded: Sequence[str],
                 profiles: Dict[str, TensorProfile], config: XQuantConfig,
                 output_names: Sequence[str]) -> Dict[str, list]:
    """MCT's four judged causes, under MCT's keys (a cause found nowhere is left out):
    outlier_removal [(layer, histogram image)], shift_negative_activation [layer], unbalanced_concatenation
    [(first input, second input, scaling)], mixed_precision_with_model_output_loss_objective [layer]."""
    causes: Dict[str, list] = {"outlier_removal": [], "shift_negative_activation": [], "unbalanced_concatenation": [],
                               "mixed_precision_with_model_output_loss_objective": []}
    for name in degraded:
        profile = profiles.get(name)
        if profile is not None and profile.max_zscore() >= config.threshold_zscore_outlier_removal:
            causes["outlier_removal"].append((name, f"outlier_histgrams/{name}.png"))
    causes["shift_negative_activation"] = [n.name for n in reference if n.opset in NEGATIVE_ACTIVATIONS]
    for name in degraded:
        node = reference.node(name) if name in reference else None
        if node is None or node.opset not in MERGING_OPSETS or len(node.inputs) < 2:
            continue
        first, second = (profiles.get(i) for i in node.inputs[:2])
        if first is None or second is None or first.count == 0 or second.count == 0:
            continue
        ratio = (second.high - second.low) / ((first.high - first.low) + 1e-10)
        if max(ratio, 1 / max(ratio, 1e-30)) >= config.threshold_ratio_unbalanced_concatenation:
            causes["unbalanced_concatenation"].append((node.inputs[0], node.inputs[1], f"first layer * {ratio}"))
    bits = config.threshold_bitwidth_mixed_precision_with_model_output_loss_objective
    for name in output_names:
        layer = layers.get(name)
        if layer is None:
            continue
        widths = [q.n_bits for q in layer.weights.values()] + ([layer.activation.n_bits] if layer.activation else [])
        if widths and min(widths) <= bits:
            causes["mixed_precision_with_model_output_loss_objective"].append(name)
    return {k: v for k, v in causes.items() if v}


def output_layers(reference: Graph, layers: Dict[str, LayerFacts]) -> List[str]:
    """The quantized layers nearest the outputs: the output nodes themselves, or the last quantized node
    upstream of each (through layers that only move values)."""
    found: List[str] = []
    for name in reference.output_names():
        todo, seen = [name], set()
        while todo:
            current = todo.pop()
            if current in seen or current not in reference:
                continue
            seen.add(current)
            if current in layers:
                found.append(current) if current not in found else None
                continue
            todo.extend(reference.node(current).inputs)
    return found


def noise_at_output(layer: LayerFacts, profile: Optional[TensorProfile], weights: Dict[str, Dict[str, Any]],
                    sensitivity: Optional[float]) -> float:
    """The squared error a layer's own quantization alone adds to the model's output, per sample: the
    noise power it puts on its tensor (its activation grid's error, measured; its kernel's, as the kernel's
    relative error times the tensor's power) times the output's sensitivity to that tensor (E|J^T v|^2).
    Without a sensitivity (a back end without gradients), the noise relative to the tensor's signal."""
    power = profile.total_sq / profile.count if profile is not None and profile.count else 0.0
    act = profile.own_error.dd / profile.own_error.n if profile is not None and profile.own_error.n else 0.0
    kernel = sum(power / max(entry["sqnr"], 1e-12) for entry in weights.values())
    if sensitivity is None:
        return (act + kernel) / max(power, 1e-30)
    return (act + kernel) * sensitivity


def metric_summary(values: Dict[str, float]) -> Dict[str, float]:
    return {**values, "sqnr_db": in_db(values["sqnr"])} if "sqnr" in values else dict(values)


__all__ = ["PairSums", "TensorProfile", "DatasetSimilarity", "similarity_pass", "weights_error",
           "detect_degraded", "judge_causes", "output_layers", "noise_at_output", "XQuantInputError"]
