"""Data generation, the order of work written once: images optimised so that every batch-norm layer's input has
the layer's stored mean and spread, with an output loss, under a learning-rate schedule, through an image pipeline
(random flip, smoothing, random crop from a larger canvas, clipping to the valid range), then finalised (smoothing,
centre crop, clipping). Each framework gives a small back end: the tensor operations the losses use, the model run
with its batch-norm inputs, and one optimiser step.

Image granularity decides what is held: BatchWise and ImageWise optimise one batch at a time (memory: one batch),
AllImages every batch together, in a random order each iteration, each matching the statistics of all images (the
other batches' last statistics held fixed), so its memory grows with the image count and is checked first."""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from hwquant.data_generation import losses
from hwquant.data_generation.config import (BNLayerWeightingType, DataGenerationConfig, DataInitType,
                                            ImageGranularity, ImageNormalizationType, ImagePipelineType,
                                            OutputLossType)
from hwquant.data_generation.schedule import LearningRateSchedule
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.passes.bn_folding import fold_batch_norms
from hwquant.errors import InvalidConfigError
from hwquant.logger import progress

log = logging.getLogger("hwquant.data_generation")

# (mean, std) per RGB channel of each normalization, on images in [0, 1] (torchvision) or [0, 255] (Keras)
NORMALIZATION = {ImageNormalizationType.TORCHVISION: ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 1.0),
                 ImageNormalizationType.KERAS_APPLICATIONS: ((127.5, 127.5, 127.5), (127.5, 127.5, 127.5), 255.0),
                 ImageNormalizationType.NO_NORMALIZATION: ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 1.0)}


@dataclass
class BatchNormTarget:
    name: str              # the batch-norm layer
    watched: str           # the tensor whose statistics are matched: its input, or its folded layer's output
    mean: np.ndarray
    var: np.ndarray
    folded_scale: Optional[np.ndarray] = None   # folded: gamma / sqrt(var + eps) ...
    folded_shift: Optional[np.ndarray] = None   # ... and beta, of y = scale (x - mean) + beta

    def loss(self, ops: losses.TensorOps, mean: Any, second_moment: Any) -> Any:
        return losses.bn_alignment(ops, mean, second_moment, self.mean, self.var, folded_scale=self.folded_scale,
                                   folded_shift=self.folded_shift)


# a batch norm is folded into the layer before it (one layer less to run forward and backward in every step)
# unless a channel's scale is this small: its input's statistics would drown in the rounding of the output's
MIN_FOLDED_SCALE = 1e-4


def batch_norm_targets(graph: Graph, adapter: Any, is_configured_type: Callable[[Node], bool],
                       type_name: Callable[[Node], str], configured: str,
                       last_layer: Optional[losses.LastLayer] = None) -> Tuple[List[BatchNormTarget], Dict[str, str]]:
    """The batch norms the images match (of the configured types), each folded into the layer before it where it
    folds, and {batch norm: why it is not used} for the others. Folds ``graph`` in place: build the model from it
    afterwards (the targets' watched tensors and ``last_layer``'s input follow the folded layers' new names)."""
    targets, ignored, scales = [], {}, {}
    for node in graph:
        params = adapter.batch_norm_params(node)
        if params is None:
            continue
        if not is_configured_type(node):
            ignored[node.name] = f"a {type_name(node)}, not among bn_layer_types ({configured})"
            continue
        var = np.asarray(params.var, np.float64)
        targets.append(BatchNormTarget(node.name, node.inputs[0], np.asarray(params.mean, np.float64), var))
        scale = np.asarray(params.gamma, np.float64) / np.sqrt(var + params.eps)
        # (a batch norm reading another one stays: folded after it, its layer's output would be neither one's input)
        if np.min(np.abs(scale)) >= MIN_FOLDED_SCALE and adapter.batch_norm_params(graph.node(node.inputs[0])) is None:
            scales[node.name] = (scale, np.asarray(params.beta, np.float64))
    # nodes followed as objects, not by name: a folded layer is renamed '<layer>_bn', which may be the name another
    # node had, its own batch norm's included (Keras' MobileNetV2 names the batch norm after 'Conv_1' 'Conv_1_bn')
    folded_into = {id(graph.node(bn)): graph.node(graph.node(bn).inputs[0]) for bn in scales}
    watched = {name: graph.node(name) for name in [t.watched for t in targets] + [t.name for t in targets]
               + ([last_layer.input_name, last_layer.output_name] if last_layer is not None else [])}
    fold_batch_norms(graph, adapter, only=lambda bn: bn.name in scales)
    remaining = {id(n) for n in graph}

    def follow(name: str) -> str:
        """The name now of the node whose output is the tensor ``name`` was (a folded batch norm's: its layer's)."""
        node = watched[name]
        while id(node) not in remaining:
            node = folded_into[id(node)]
        return node.name

    for t in targets:
        if id(watched[t.name]) not in remaining:  # folded: the layer's output is the batch norm's
            t.folded_scale, t.folded_shift = scales[t.name]
            t.watched = follow(t.name)
        else:
            t.watched = follow(t.watched)
    if last_layer is not None:
        last_layer.input_name, last_layer.output_name = follow(last_layer.input_name), follow(last_layer.output_name)
    return targets, ignored


class GenerationBackend(Protocol):
    ops: losses.TensorOps
    channel_axis: int      # of the images (1: channels first, -1: channels last)

    def images(self, values: np.ndarray) -> Any:
        """A trainable tensor (or variable) holding ``values``."""

    def optimizer(self, images: Any, lr: float) -> Any:
        """The configured optimiser for ``images``."""

    def run(self, images: Any) -> Tuple[List[Any], Dict[str, Any]]:
        """(the model's outputs, {watched tensor name: tensor}) for ``images``: the watched tensors are the batch
        norms' inputs and the last linear layer's output."""

    def step(self, images: Any, optimizer: Any, loss: Callable[[Any], Any], lr: float) -> float:
        """One step of ``optimizer`` on ``images`` at rate ``lr`` for ``loss(images)``; the loss's value."""

    def gradient_norm(self, images: Any, loss: Callable[[Any], Any]) -> float:
        """The L2 norm of d loss(images) / d images (no step)."""

    def state_bytes(self, images: Any, optimizer: Any) -> int:
        """The bytes ``images`` and their optimiser's state hold."""

    def transform(self, images: Any, flip: bool, crop: Optional[Tuple[int, int]], size: Tuple[int, int],
                  smooth: bool, low: Optional[np.ndarray], high: Optional[np.ndarray]) -> Any:
        """The pipeline: flip horizontally, smooth (3x3 Gaussian, sigma 1.25), crop ``size`` at ``crop`` (row,
        column; None: the centre), clip each channel to [low, high] (None: no clipping)."""

    def finalize(self, images: Any) -> List[Any]:
        """The generated images, one tensor per image (a batch of one), detached."""


def smoothing_kernel(size: int = 3, sigma: float = 1.25) -> np.ndarray:
    """The pipeline's smoothing filter (MCT's: a 3 x 3 Gaussian, sigma 1.25), normalised to sum 1."""
    x = np.arange(size, dtype=np.float32) - (size - 1) / 2
    g = np.exp(-(x[:, None] ** 2 + x[None, :] ** 2) / (2 * sigma ** 2))
    return (g / g.sum()).astype(np.float32)


def check_request(n_images: Any, output_image_size: Any, config: Any) -> Tuple[int, int]:
    """The facades' argument checks; the image size as (height, width)."""
    if isinstance(n_images, bool) or not isinstance(n_images, int) or n_images < 1:
        raise InvalidConfigError(f"n_images must be an int >= 1, got {n_images!r}")
    if not isinstance(config, DataGenerationConfig):
        raise InvalidConfigError("data_generation_config must be a DataGenerationConfig (from get_pytorch_ / "
                                 f"get_keras_data_generation_config()), got {type(config).__name__}")
    pair = (output_image_size, output_image_size) if isinstance(output_image_size, int) else output_image_size
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in pair)):
        raise InvalidConfigError(f"output_image_size must be an int >= 1 or a pair (height, width) of them, got "
                                 f"{output_image_size!r}")
    return int(pair[0]), int(pair[1])


def valid_range(config: DataGenerationConfig, channels: int) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Each channel's valid range after the model's normalization (None: no clipping)."""
    if not config.image_clipping:
        return None, None
    mean, std, top = NORMALIZATION[config.image_normalization_type]
    mean_c, std_c = np.resize(np.asarray(mean), channels), np.resize(np.asarray(std), channels)
    return (0.0 - mean_c) / std_c, (top - mean_c) / std_c


def initial_values(kind: DataInitType, shape: Tuple[int, ...], channel_axis: int, rng: np.random.Generator) -> np.ndarray:
    if kind == DataInitType.Gaussian:
        return rng.standard_normal(shape).astype(np.float32)
    # Diverse: each image its own mean and spread
    per_image = (shape[0],) + (1,) * (len(shape) - 1)
    return (rng.uniform(-1.0, 1.0, per_image) + rng.uniform(0.5, 1.5, per_image)
            * rng.standard_normal(shape)).astype(np.float32)


@dataclass
class DataGenerationReport:
    """What a data-generation run used, did and cost (also said in the log)."""
    n_images: int
    image_size: Tuple[int, int]
    channels: int
    seconds: float
    seconds_per_image: float
    held_bytes_per_image: int            # images and their optimiser state, held while they are optimised
    peak_memory_growth_bytes: int        # the process's peak resident memory growth (0: it had been bigger before)
    batch_norm_layers: List[str]         # the batch norms whose statistics the images match
    folded_batch_norms: int              # of those, folded into the layer before them for speed
    ignored_batch_norm_layers: Dict[str, str]   # {layer: why it is not used}
    output_loss: str                     # the output loss used (after any fallback)
    last_layer: Optional[str]            # the layer REGULARIZED_MIN_MAX_DIFF reads
    image_granularity: str
    layer_weights: Dict[str, float]      # of the first batch (GRAD: measured on it)
    fallbacks: List[str] = field(default_factory=list)
    final_losses: List[float] = field(default_factory=list)   # each batch's last loss


class GeneratedImages(list):
    """The generated images (MCT's form: a list, one batch of one per image) with ``.report``."""
    report: DataGenerationReport


# AllImages optimises every image at once: their values and optimiser state (about 3 copies) must fit in this
# share of the machine's memory, or the run is refused before it starts
ALL_IMAGES_MEMORY_SHARE = 0.5
OPTIMIZER_COPIES = 2


def _physical_memory() -> Optional[int]:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _peak_rss() -> int:
    try:
        import resource
    except ImportError:  # (not on Windows)
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def last_linear_layer(graph: Graph, is_last_type: Callable[[Node], bool], is_batch_norm: Callable[[Node], bool],
                      unit_norms: Callable[[Node], np.ndarray]) -> Optional[losses.LastLayer]:
    """The last layer (in graph order) of the configured last-layer types whose output no batch norm reads (MCT's
    rule), with each output unit's weight norm."""
    for node in reversed(list(graph)):
        if is_last_type(node) and not any(is_batch_norm(r) for r in graph.successors(node)):
            return losses.LastLayer(node.name, node.inputs[0], node.name, np.asarray(unit_norms(node), np.float32))
    return None


def resolve_output_loss(config: DataGenerationConfig, targets: Sequence[BatchNormTarget],
                        last_layer: Optional[losses.LastLayer], fallbacks: List[str]) -> OutputLossType:
    """The output loss the run can use; each fallback said in ``fallbacks``; an error where nothing guides the
    images."""
    kind = config.output_loss_type
    if kind == OutputLossType.REGULARIZED_MIN_MAX_DIFF and last_layer is None:
        fallbacks.append("REGULARIZED_MIN_MAX_DIFF needs a last linear layer (of last_layer_types) not followed by a "
                         "batch norm; the model has none: INVERSE_MIN_MAX_DIFF on the outputs is used instead")
        kind = OutputLossType.INVERSE_MIN_MAX_DIFF
    if not targets:
        if kind == OutputLossType.NONE:
            raise InvalidConfigError("the model has no batch-norm layer to match (of bn_layer_types) and the output "
                                     "loss is NONE: nothing guides the images; set output_loss_type (e.g. "
                                     "OutputLossType.NEGATIVE_MIN_MAX_DIFF), or calibrate on real data")
        fallbacks.append(f"the model has no batch-norm layer to match: the images are guided by the output loss "
                         f"({kind.name}) alone, which widens the output's range but does not make the inner layers' "
                         "statistics realistic; expect weaker calibration than real data (measured on MTCNN's O-Net and "
                         "R-Net: worse than Gaussian noise)")
    return kind


def generate(backend: GenerationBackend, targets: Sequence[BatchNormTarget], n_images: int, size: Tuple[int, int],
             channels: int, config: DataGenerationConfig, seed: int = 0, last_layer: Optional[losses.LastLayer] = None,
             ignored: Optional[Dict[str, str]] = None) -> GeneratedImages:
    fallbacks: List[str] = []
    output_kind = resolve_output_loss(config, targets, last_layer, fallbacks)
    rng = np.random.default_rng(seed)
    augment = config.image_pipeline_type == ImagePipelineType.SMOOTHING_AND_AUGMENTATION
    extra = config.extra_pixels if augment else (0, 0)
    canvas = (size[0] + extra[0], size[1] + extra[1])
    low, high = valid_range(config, channels)
    per_image = config.image_granularity == ImageGranularity.ImageWise
    all_images = config.image_granularity == ImageGranularity.AllImages
    bytes_per_image = 4 * channels * canvas[0] * canvas[1] * (1 + OPTIMIZER_COPIES)
    memory = _physical_memory()
    if all_images and memory and n_images * bytes_per_image > ALL_IMAGES_MEMORY_SHARE * memory:
        raise InvalidConfigError(
            f"ImageGranularity.AllImages optimises all {n_images} images at once, about "
            f"{n_images * bytes_per_image / 2**30:.1f} GiB with their optimiser state, more than half of this machine's "
            f"{memory / 2**30:.1f} GiB; use ImageGranularity.BatchWise (one batch at a time) or fewer images")
    batch = config.data_gen_batch_size
    counts = [min(batch, n_images - first) for first in range(0, n_images, batch)]
    groups = [list(range(len(counts)))] if all_images else [[b] for b in range(len(counts))]
    for text in fallbacks:
        log.warning("data generation: %s", text)
    images_out = GeneratedImages()
    final_losses: List[float] = []
    first_weights: Dict[str, float] = {}
    names = [t.name for t in targets]
    start, rss_before = time.perf_counter(), _peak_rss()
    for group in groups:
        states = []
        for b in group:
            shape = (counts[b], channels, *canvas) if backend.channel_axis == 1 else (counts[b], *canvas, channels)
            images = backend.images(initial_values(config.data_init_type, shape, backend.channel_axis, rng))
            states.append(_BatchState(images, backend.optimizer(images, config.initial_lr),
                                      LearningRateSchedule(config.scheduler_type, config.initial_lr, config.n_iter),
                                      counts[b]))
        held: Dict[int, Dict[str, Tuple[np.ndarray, np.ndarray]]] = {}
        if all_images and len(states) > 1:  # every batch's statistics, before any step
            for j, state in enumerate(states):
                _, tensors = backend.run(backend.transform(state.images, False, None, size, augment, low, high))
                held[j] = _detached(backend.ops, {t.name: losses.batch_stats(
                    backend.ops, tensors[t.watched], backend.channel_axis, False) for t in targets})
        weights = _weights(backend, config, targets, states[0].images, size, augment, low, high) if targets else {}
        first_weights = first_weights or weights
        desc = ("data generation" if len(groups) == 1 else f"data generation, batch {group[0] + 1}/{len(groups)}")
        for _ in progress(range(config.n_iter), desc):
            for j in (rng.permutation(len(states)) if len(states) > 1 else [0]):
                state = states[j]
                flip = augment and bool(rng.integers(2))
                crop = (int(rng.integers(extra[0] + 1)), int(rng.integers(extra[1] + 1)))
                others = _others(held, j, states) if held else None
                seen: Dict[str, Tuple[Any, Any]] = {}

                def loss(x, flip=flip, crop=crop, state=state, others=others, seen=seen, weights=weights):
                    x = backend.transform(x, flip, crop, size, augment, low, high)
                    outputs, tensors = backend.run(x)
                    feature = (losses.spatial_mean(backend.ops, tensors[last_layer.input_name], backend.channel_axis)
                               if last_layer is not None and output_kind == OutputLossType.REGULARIZED_MIN_MAX_DIFF
                               else None)
                    total: Any = losses.output_loss(
                        backend.ops, output_kind, outputs,
                        tensors.get(last_layer.output_name) if last_layer is not None else None, last_layer,
                        feature, backend.channel_axis) * config.output_loss_multiplier
                    for t in targets:
                        mean, second = losses.batch_stats(backend.ops, tensors[t.watched], backend.channel_axis,
                                                          per_image)
                        seen[t.name] = (mean, second)
                        if others is not None:  # all images: this batch's statistics with the others' held ones
                            (mean_sum, second_sum), total_count = others[t.name], others["count"]
                            mean = (mean * state.count + backend.ops.constant(mean_sum, mean)) / total_count
                            second = (second * state.count + backend.ops.constant(second_sum, second)) / total_count
                        total = total + weights[t.name] * t.loss(backend.ops, mean, second)
                    return total
                state.loss = backend.step(state.images, state.optimizer, loss, state.schedule.lr)
                state.schedule.step(state.loss)
                if held:
                    held[j] = _detached(backend.ops, seen)
        for state in states:
            final_losses.append(float(state.loss))
            images_out += backend.finalize(backend.transform(state.images, False, None, size, augment, low, high))
        held_bytes = sum(backend.state_bytes(s.images, s.optimizer) for s in states)
        del states
    seconds = time.perf_counter() - start
    images_out.report = DataGenerationReport(
        n_images, size, channels, seconds, seconds / n_images, held_bytes // max(sum(counts[b] for b in group), 1),
        max(_peak_rss() - rss_before, 0), names, sum(t.folded_scale is not None for t in targets),
        dict(ignored or {}), output_kind.name,
        last_layer.name if last_layer is not None else None, config.image_granularity.name, first_weights,
        fallbacks, final_losses)
    r = images_out.report
    log.info("generated %d images of %dx%dx%d in %.1f s (%.2f s per image; %.3f MB held per image, peak memory "
             "+%.0f MB); %d batch-norm layers matched%s; output loss %s%s",
             n_images, size[0], size[1], channels, seconds, r.seconds_per_image, r.held_bytes_per_image / 1e6,
             r.peak_memory_growth_bytes / 1e6, len(names),
             f" ({len(r.ignored_batch_norm_layers)} not used: {r.ignored_batch_norm_layers})"
             if r.ignored_batch_norm_layers else "", r.output_loss,
             f" on {r.last_layer}" if r.last_layer and output_kind == OutputLossType.REGULARIZED_MIN_MAX_DIFF else "")
    return images_out


@dataclass
class _BatchState:
    images: Any
    optimizer: Any
    schedule: LearningRateSchedule   # (its .lr is the rate of the batch's next step)
    count: int
    loss: float = float("nan")


def _detached(ops: losses.TensorOps, stats: Dict[str, Tuple[Any, Any]]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """A batch's (mean, second moment) per batch norm, detached, held for the other batches' steps (AllImages)."""
    return {name: (ops.numpy(mean), ops.numpy(second)) for name, (mean, second) in stats.items()}


def _others(held: Dict[int, Dict[str, Tuple[np.ndarray, np.ndarray]]], j: int,
            states: Sequence[_BatchState]) -> Dict[str, Any]:
    """The other batches' statistics, summed with their image counts as weights."""
    out: Dict[str, Any] = {"count": float(sum(s.count for s in states))}
    for name in held[j]:
        out[name] = (sum(held[k][name][0] * states[k].count for k in held if k != j),
                     sum(held[k][name][1] * states[k].count for k in held if k != j))
    return out


def _weights(backend: GenerationBackend, config: DataGenerationConfig, targets: Sequence[BatchNormTarget],
             images: Any, size: Tuple[int, int], augment: bool, low: Any, high: Any) -> Dict[str, float]:
    names = [t.name for t in targets]
    if config.layer_weighting_type != BNLayerWeightingType.GRAD:
        return losses.layer_weights(config.layer_weighting_type, names)
    norms = []
    for t in targets:  # one gradient per layer, on the batch's starting images (once per batch)
        def loss(x, t=t):
            _, tensors = backend.run(backend.transform(x, False, None, size, augment, low, high))
            mean, second = losses.batch_stats(backend.ops, tensors[t.watched], backend.channel_axis,
                                              config.image_granularity == ImageGranularity.ImageWise)
            return t.loss(backend.ops, mean, second)
        norms.append(backend.gradient_norm(images, loss))
    return losses.layer_weights(BNLayerWeightingType.GRAD, names, norms)
