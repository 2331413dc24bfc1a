"""The GPTQ training loop, written once for every framework: learn how each quantized kernel rounds so
that the quantized model's activations at the interest points follow the float model's (the student and
teacher, interest points, soft rounding and losses: docs/architecture.md, "GPTQ").

This module holds all that does not depend on the framework: the schedules, the loss (gptq/loss.py) and the
regulariser with their weights, the optimizers' grouping, the epochs and steps, when the teacher's activations
are kept, the choice of the bias correction after training, what is written back and reported. A framework
gives the models, its tensor operations and the optimizer steps through a ``GPTQBackend`` (torch/gptq/backend.py,
keras/gptq/backend.py). Training starts from the float kernels and biases: bias correction compensates
nearest rounding, which GPTQ replaces.
"""
from __future__ import annotations

import copy
import logging
import os
import time
from abc import ABC, abstractmethod
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence

import numpy as np

from hwquant.core.pipeline.distributed import SINGLE_PROCESS, Collective, DistributedError, fingerprint
from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.statistics.node_parameters import restore_biases, set_bias
from hwquant.core.passes.output_mean_correction import correct_output_means
from hwquant.errors import InvalidConfigError
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.loss import multiple_tensors_mse_loss, sample_layer_attention_loss
from hwquant.gptq.schedules import linear_annealing, regularization_beta
from hwquant.logger import progress
from hwquant.trainable_infrastructure.common import VariableGroup
from hwquant.trainable_infrastructure.node_configs import (trainable_activation_config, trainable_quantizer_classes,
                                                          trainable_weights_config)

log = logging.getLogger("hwquant.gptq")

# (graph holding float kernels, {layer: learned kernel}) -> layers corrected; the PTQ statistics bind it
AnalyticCorrection = Callable[[Graph, Dict[str, np.ndarray]], int]


class GPTQOps(Protocol):
    """The tensor operations the losses, the regulariser and the teacher cache use, on a framework's tensors
    (the rest is Python's arithmetic on them). ``channel_axis``: the activations' channel axis."""
    channel_axis: int

    def square(self, x: Any) -> Any: ...
    def mean(self, x: Any, axis: Optional[int] = None) -> Any: ...
    def sum(self, x: Any, axis: Optional[int] = None) -> Any: ...
    def max(self, x: Any) -> Any: ...
    def maximum(self, x: Any, floor: float) -> Any: ...
    def reshape(self, x: Any, shape: tuple) -> Any: ...
    def stack(self, xs: List[Any]) -> Any: ...
    def sigmoid(self, x: Any) -> Any: ...
    def clip(self, x: Any, low: float, high: float) -> Any: ...
    def abs(self, x: Any) -> Any: ...
    def power(self, x: Any, p: float) -> Any: ...
    def like(self, x: Any, other: Any) -> Any:
        """``x`` (a tensor or a numpy array) as a tensor of ``other``'s dtype and device."""
    def concat(self, parts: List[Any]) -> Any: ...
    def take(self, x: Any, rows: np.ndarray) -> Any:
        """Rows ``rows`` of ``x`` (the samples or the teacher cache) as a tensor the models take."""
    def nbytes(self, x: Any) -> int: ...


class GPTQBackend(ABC):
    """A framework's part of GPTQ: the models and the arithmetic. Called in this order: ``build``,
    ``hessian_scores`` (if Hessian weights are asked for), ``make_optimizers``, then per step
    ``set_quantized_fraction`` and ``train_step`` (whose loss calls ``student_points``, ``kernels``,
    ``rounding_regularizations``), then ``learned``."""

    adapter: Any  # the framework adapter (names the weights; its collective: the processes of the run)
    ops: GPTQOps
    quantizers: List[Any]  # the trained layers' kernel quantizers (``StudentQuantizers.kernels``), set by ``build``
    float_model: Any  # the float model, built by ``build``: the bias corrections are judged against it
    teacher_cached: bool = False

    def gather_samples(self, samples: List[Any]) -> List[Any]:
        """Across processes: every rank's training samples (rank order), for the bias correction after
        training, which then decides the same on every rank."""
        raise NotImplementedError(f"{type(self).__name__} does not run across processes")

    @abstractmethod
    def build(self, graph: Graph, cfg: GradientPTQConfig, samples: Sequence[Any]) -> List[Node]:
        """Build the student, the float teacher and ``float_model`` from ``graph``; returns the layers whose
        kernel trains, in graph order (their interest points are ``interest_point(layer)``)."""

    @abstractmethod
    def hessian_scores(self, n_samples: int, batch_size: int, per_sample: bool) -> np.ndarray:
        """(samples, points) Hessian-based scores of the interest points on the first ``n_samples``."""

    @abstractmethod
    def teacher_points(self, inputs: List[Any]) -> List[Any]:
        """The float model's interest-point activations for a batch (no gradient)."""

    @abstractmethod
    def student_points(self, inputs: List[Any]) -> List[Any]:
        """The student's interest-point activations for a batch, in training mode (with gradients)."""

    @abstractmethod
    def kernels(self) -> tuple:
        """([[quantized kernel]], [[float kernel]]) per trained layer, as MCT's loss signature takes them."""

    def rounding_regularizations(self, beta: float) -> List[Any]:
        """Each trained layer's rounding regulariser at temperature ``beta`` (0 for STE)."""
        return [q.rounding_regularization(beta) for q in self.quantizers]

    @abstractmethod
    def trained_biases(self, train_bias: bool) -> List[Any]:
        """The biases that train (none unless ``train_bias``)."""

    @abstractmethod
    def make_optimizers(self, groups: List[tuple]) -> None:
        """The optimizers of ``optimizer_groups``' [(spec, its config field, variables)]; only their variables
        train (the first group's: the rounding variables)."""

    @abstractmethod
    def train_step(self, loss: Callable[[], Any]) -> float:
        """Evaluate ``loss()``, take its gradients over the trained variables (averaged across processes) and
        apply the optimizers; returns the loss value."""

    @abstractmethod
    def set_quantized_fraction(self, fraction: float) -> None:
        """Gradual activation quantization: the quantized share of every activation quantizer's output."""

    @abstractmethod
    def rounding_state(self) -> tuple:
        """(gradients, values) of the rounding variables as numpy arrays: ``cfg.log_function``'s arguments."""

    @abstractmethod
    def learned(self, train_bias: bool) -> List[tuple]:
        """Per trained layer: (its kernel on the grid, its trained bias or None), numpy arrays."""

    def free_memory(self) -> Optional[int]:
        """Bytes free where the teacher's activations would be kept (None: unknown); by default the host's."""
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None


class StudentQuantizers:
    """The student's quantizers, made as a framework's builder asks for them: a GPTQ quantizer (of
    ``cfg.rounding_type``, a subclass of ``weights_base``) for every quantized kernel, whose rounding variables
    start from the float kernel (``init_rounding(as_kernel(kernel))``); an STE quantizer (``activations_base``)
    with fixed parameters for every quantized activation, wrapped by ``gradual`` (the quantized fraction's
    holder) when gradual activation quantization is on. ``layers``: the trained layers, in graph order."""

    def __init__(self, graph: Graph, adapter: Any, cfg: GradientPTQConfig, weights_base: type, activations_base: type,
                 gradual: Callable[[Any], Any], as_kernel: Callable[[np.ndarray], Any] = np.asarray):
        from hwquant.trainable_infrastructure.common import TrainingMethod

        self.override = cfg.gptq_quantizer_params_override or {}
        self.cfg, self.as_kernel, self.gradual_class = cfg, as_kernel, gradual
        self.weight_classes, self.activation_classes = trainable_quantizer_classes(
            graph, adapter.kernel_attr, (cfg.rounding_type, weights_base, self.override),
            (TrainingMethod.STE, activations_base, {}), "GPTQ")
        self.layers = [graph.node(name) for name in self.weight_classes]
        self.points = [interest_point(node) for node in self.layers]
        self.by_layer: Dict[str, Any] = {}
        self.gradual: List[Any] = []

    def weights(self, node: Node, attr: str) -> Any:
        q = self.by_layer[node.name] = self.weight_classes[node.name](trainable_weights_config(node, attr),
                                                                      **self.override)
        q.init_rounding(self.as_kernel(np.asarray(node.weights[attr], np.float32)))
        return q

    def activation(self, node: Node) -> Any:
        q = self.activation_classes[node.name](trainable_activation_config(node), freeze_quant_params=True)
        if self.cfg.gradual_activation_quantization_config is None:
            return q
        self.gradual.append(self.gradual_class(q))
        return self.gradual[-1]

    @property
    def kernels(self) -> List[Any]:
        """The kernels' quantizers, in the order of ``layers`` (once the student is built)."""
        return [self.by_layer[node.name] for node in self.layers]


def check_gptq_arguments(gptq_config: Any, gptq_representative_data_gen: Any, config_getter: str) -> None:
    """The facades' argument checks (``config_getter``: the framework's get_<framework>_gptq_config)."""
    if gptq_config is not None and not isinstance(gptq_config, GradientPTQConfig):
        raise InvalidConfigError(f"gptq_config must be a GradientPTQConfig (mct.gptq.{config_getter}(n_epochs)) "
                                 f"or None, got {type(gptq_config).__name__}")
    if gptq_representative_data_gen is not None and not callable(gptq_representative_data_gen):
        raise InvalidConfigError(f"gptq_representative_data_gen must be a function returning an iterable of batches "
                                 f"or None, got {type(gptq_representative_data_gen).__name__}")


def optimizer_groups(cfg: GradientPTQConfig, rounding: List[Any], biases: List[Any], qparams: List[Any]) -> List[tuple]:
    """MCT's grouping of the trained variables, as [(optimizer spec, its config field, variables)]:
    ``optimizer`` for the rounding variables; the biases with ``optimizer_bias`` (else ``optimizer_rest``);
    learned quantization parameters with ``optimizer_quantization_parameter`` (else ``optimizer_rest``)."""
    groups = [(cfg.optimizer, "optimizer", rounding)]
    rest: List[Any] = []
    for params, own, name in ((biases, cfg.optimizer_bias, "optimizer_bias"),
                              (qparams, cfg.optimizer_quantization_parameter, "optimizer_quantization_parameter")):
        if params and own is not None:
            groups.append((own, name, params))
        else:
            rest += params
    if rest:
        if cfg.optimizer_rest is None:
            raise InvalidConfigError("training the biases or the quantization parameters needs GradientPTQConfig."
                                     "optimizer_rest (or optimizer_bias / optimizer_quantization_parameter)")
        groups.append((cfg.optimizer_rest, "optimizer_rest", rest))
    return groups


def fresh_optimizer(spec: Any, what: str, base: type, copy: Callable[[Any], Any], make: Callable[[Any], Any],
                    expected: str) -> Any:
    """A new optimizer from the config field ``what``'s ``spec``: an instance of the framework's ``base``
    (``copy``: its class and settings, the given instance left alone), or a class or function that ``make``
    calls for one. ``expected`` names what is accepted in the error."""
    if isinstance(spec, base):
        return copy(spec)
    made = make(spec) if callable(spec) else None
    if isinstance(made, base):
        return made
    origin = type(spec).__module__.split(".")[0]
    hint = "" if origin in (base.__module__.split(".")[0], "builtins") else f" (that is a {origin} optimizer)"
    raise InvalidConfigError(f"GradientPTQConfig.{what} must be a {expected}, its class or a function returning one; "
                             f"got {type(spec).__name__}{hint}")


def install_kernels(graph: Graph, adapter: Any, kernels: Dict[str, np.ndarray]) -> None:
    """Write the learned kernels into ``graph``'s layers."""
    for name, kernel in kernels.items():
        graph.node(name).set_weight(adapter.kernel_attr(graph.node(name)), kernel)


def interest_point(layer: Node) -> str:
    """The node whose output is ``layer``'s interest point: the end of its fused group, else itself."""
    return layer.fused_into or layer.name


def hessian_loss_weights(cfg: GradientPTQConfig, backend: GPTQBackend, n_samples: int, n_points: int,
                         collective: Collective = SINGLE_PROCESS) -> tuple:
    """(loss weights: (points,) or (samples, points) for sample-layer attention; regulariser weights (points,))."""
    h = cfg.hessian_weights_config
    if h is None:
        return np.full(n_points, 1.0 / n_points, np.float32), np.ones(n_points, np.float32)
    asked = h.hessians_num_samples
    if asked is not None and collective.distributed:  # sharded: each rank scores its share of the samples
        asked = -(-asked // collective.world_size)
    n = n_samples if h.per_sample or asked is None else min(asked, n_samples)
    if not h.per_sample and asked is not None and asked > n_samples:
        log.info("GPTQ Hessian scores: %d samples asked, the data has %d", asked, n_samples)
    scores = backend.hessian_scores(n, h.hessian_batch_size, h.per_sample)
    # every rank's scores (rank order): the weights below are means over all of them
    everyone = np.concatenate(collective.exchange(scores, "computing GPTQ Hessian scores"))
    if h.per_sample:  # (the loss weights stay per sample: this rank's own samples)
        return scores.astype(np.float32), everyone.mean(0).astype(np.float32)
    scores = everyone.astype(np.float64)
    if h.norm_scores:
        scores = scores / (scores.sum(1, keepdims=True) + 1e-12)
    mean = scores.mean(0)
    if h.log_norm:
        positive = mean[mean > 0]
        mean = np.where(mean > 0, mean, positive.min() if len(positive) else 1.0)
        logs = np.log10(mean)
        span = logs.max() - logs.min()
        mean = (logs - logs.min()) / span if h.scale_log_norm and span > 0 else logs - logs.min()
    return mean.astype(np.float32), np.ones(n_points, np.float32)


def gptq_train(graph: Graph, backend: GPTQBackend, cfg: GradientPTQConfig, samples: Sequence[Any], batch_size: int,
               analytic_correction: AnalyticCorrection) -> Dict[str, Any]:
    """Run GPTQ on ``graph``, a quantized graph with its float weights and biases (PTQ's graph before
    bias correction), in place: the learned kernels, biases and parameters are written into its nodes,
    with a bias correction for the learned rounding (measured, or ``analytic_correction``, whichever
    leaves the output closer to the float model's on the samples). ``samples``: one array per model input
    holding every training sample. Returns the run's information (UserInformation.gptq_info_dict)."""
    collective = getattr(backend.adapter, "collective", SINGLE_PROCESS)
    with collective.guard("training GPTQ"):  # (a failure here stops the other ranks with its message)
        return _gptq_train(graph, backend, cfg, samples, batch_size, analytic_correction, collective)


def _gptq_train(graph: Graph, backend: GPTQBackend, cfg: GradientPTQConfig, samples: Sequence[Any], batch_size: int,
                analytic_correction: AnalyticCorrection, collective: Collective) -> Dict[str, Any]:
    start = time.perf_counter()
    ops, samples = backend.ops, list(samples)
    layers = backend.build(graph, cfg, samples)
    if not layers:
        raise InvalidConfigError("GPTQ found no quantized kernel to train (every layer's kernel quantization is "
                                 "disabled): use post-training quantization instead")
    names = [node.name for node in layers]
    point_of = {node.name: interest_point(node) for node in layers}
    n_samples = len(samples[0])
    check_same_steps(collective, n_samples, batch_size)
    steps_per_epoch = -(-n_samples // batch_size)
    total_steps = cfg.n_epochs * steps_per_epoch
    loss_weights, reg_weights = hessian_loss_weights(cfg, backend, n_samples, len(layers), collective)
    hessian_seconds = time.perf_counter() - start
    beta = regularization_beta(total_steps)
    fraction = None
    if cfg.gradual_activation_quantization_config is not None:
        a = cfg.gradual_activation_quantization_config.q_fraction_scheduler_policy
        fraction = linear_annealing(a.start_step, a.end_step or total_steps, a.initial_q_fraction, a.target_q_fraction)
    per_sample = loss_weights.ndim == 2
    loss_fn = cfg.loss or partial(sample_layer_attention_loss if per_sample else multiple_tensors_mse_loss, ops)
    rounding, qparams = ([v for q in backend.quantizers for v in q.get_trainable_variables(group)]
                         for group in (VariableGroup.WEIGHTS, VariableGroup.QPARAMS))
    backend.make_optimizers(optimizer_groups(cfg, rounding, backend.trained_biases(cfg.train_bias), qparams))
    cache = teacher_cache(backend, samples, batch_size)
    reg_scale = cfg.regularization_factor / max(float(reg_weights.max()), 1e-30)
    rng = np.random.default_rng(0)

    def step_loss(x: List[Any], target: List[Any], weights: Any, beta: float) -> Any:
        points = backend.student_points(x)
        kernels_q, kernels_f = backend.kernels() if cfg.loss is not None else (None, None)  # a user's loss may read them
        loss = loss_fn(points, [ops.like(t, p) for t, p in zip(target, points)], kernels_q, kernels_f,
                       [None] * len(points), [None] * len(points), ops.like(weights, points[0]))
        if cfg.regularization_factor:
            reg = sum(float(w) * r for w, r in zip(reg_weights, backend.rounding_regularizations(beta)))
            loss = loss + reg_scale * reg
        return loss

    losses: List[float] = []
    step = 0
    epochs = progress(range(cfg.n_epochs), "GPTQ epochs")
    for _ in epochs:
        order = rng.permutation(n_samples)
        for i in progress(range(0, n_samples, batch_size), "GPTQ steps", total=steps_per_epoch):
            if fraction is not None:
                backend.set_quantized_fraction(fraction(step))
            rows = order[i:i + batch_size]
            x = [ops.take(s, rows) for s in samples]
            target = [ops.take(c, rows) for c in cache] if cache is not None else backend.teacher_points(x)
            weights = loss_weights[rows] if per_sample else loss_weights
            value = backend.train_step(lambda: step_loss(x, target, weights, beta(step)))  # noqa: B023 (called at once)
            if not np.isfinite(value):
                raise InvalidConfigError(f"GPTQ diverged at step {step} (loss {value}): lower the learning rates "
                                         f"or the regularization factor")
            losses.append(value)
            if cfg.log_function is not None:
                cfg.log_function(value, *backend.rounding_state())
            if hasattr(epochs, "set_postfix"):
                epochs.set_postfix(loss=f"{value:.4g}")
            step += 1
    training_seconds = time.perf_counter() - start - hessian_seconds
    cache = None  # (freed for the bias correction)
    kernels = {}  # the analytic bias correction reads the float kernels first: kernels installed after
    for node, q, (kernel, bias) in zip(layers, backend.quantizers, backend.learned(cfg.train_bias)):
        if q.quantization_parameter_learning:
            attrs = node.final_config.weights_quantization_cfg.attrs
            attrs[backend.adapter.kernel_attr(node)].weights_quantization_params.update(q.inferable_params())
        if bias is not None:
            set_bias(node, backend.adapter, bias)
        kernels[node.name] = kernel
    wanted = [k for k in names if graph.node(k).final_config.weights_quantization_cfg.weights_bias_correction]
    if collective.distributed:  # the correction is fitted and judged on every rank's samples, identically
        samples = backend.gather_samples(samples)
    correction = correct_biases(graph, backend, kernels, analytic_correction, wanted, point_of, samples, batch_size)
    if collective.distributed:
        agree_with_rank_0(collective, graph, names)
    log.info("GPTQ: %d kernels, %d steps, loss %.4g -> %.4g (Hessian scores %.1f s, training %.1f s, "
             "bias correction (%s) %.1f s)", len(names), step, losses[0], losses[-1], hessian_seconds, training_seconds,
             correction["bias_correction"], time.perf_counter() - start - hessian_seconds - training_seconds)
    return {"losses": losses, "steps": step, "epochs": cfg.n_epochs, "trained_layers": names,
            "interest_points": list(point_of.values()), "hessian_seconds": hessian_seconds,
            "training_seconds": training_seconds, "rounding_type": cfg.rounding_type.name,
            "teacher_cached": backend.teacher_cached, **correction}


# The float teacher's interest-point activations are kept for every sample, computed once, when they fit in
# a quarter of the memory free where they are kept, or in this many bytes if that is more; otherwise the
# teacher runs at every step (about a fifth of a step's time on MobileNetV2).
TEACHER_CACHE_BYTES = 1 << 30
TEACHER_CACHE_SHARE_OF_FREE_MEMORY = 0.25


def teacher_cache_budget(free_bytes: Optional[int]) -> int:
    return max(TEACHER_CACHE_BYTES, int(TEACHER_CACHE_SHARE_OF_FREE_MEMORY * free_bytes) if free_bytes else 0)


def teacher_cache(backend: GPTQBackend, samples: List[Any], batch_size: int) -> Optional[List[Any]]:
    """The teacher's interest-point activations for every sample, when they fit ``teacher_cache_budget``."""
    ops, n = backend.ops, len(samples[0])
    first = backend.teacher_points([s[:batch_size] for s in samples])
    per_sample = sum(ops.nbytes(t) for t in first) / max(len(first[0]), 1)
    backend.teacher_cached = per_sample * n <= teacher_cache_budget(backend.free_memory())
    if not backend.teacher_cached:
        return None
    rest = [backend.teacher_points([s[i:i + batch_size] for s in samples]) for i in range(batch_size, n, batch_size)]
    return [ops.concat(list(parts)) for parts in zip(first, *rest)]


def correct_biases(graph: Graph, backend: GPTQBackend, kernels: Dict[str, np.ndarray], analytic: AnalyticCorrection,
                   layers: List[str], point_of: Dict[str, str], samples: List[Any], batch_size: int) -> Dict[str, Any]:
    """Install the learned ``kernels`` into ``graph`` (its float kernels until then) with the better of two bias
    corrections for ``layers``, which compensate the learned rounding's shift of the layers' output means:

    - measured (core/passes/output_mean_correction.py): each trained layer's output brought to the float
      channel means at its interest point, layer by layer, in the quantized model; it also compensates the mean
      errors that reach a layer from the layers above (on the Fashion-MNIST CNNs it wins several dB);
    - analytic (``analytic``: ``(W - Q(W)) E[x]`` from the float input means, each layer on its own); on
      MobileNetV2 at 4 bits with few samples it was the better one.

    The measured one is fitted on every other sample and both are judged on the rest (fitted and judged on the
    same few samples, the measured one looks better than it is); if it wins, it is fitted again on every sample.
    Returns what was chosen and why."""
    adapter = backend.adapter
    if not layers:
        install_kernels(graph, adapter, kernels)
        return {"bias_correction": None, "bias_corrected": []}
    runner = adapter.node_runner(graph)  # (for the channel means of the teacher's points)

    def measured(data: List[Any]) -> List[str]:
        sums: Dict[str, Any] = {}
        for x in _batches(data, batch_size):
            for name, point in zip(point_of, backend.teacher_points(x)):
                sums[name] = sums.get(name, 0.0) + runner.channel_mean(point, graph.node(name)) * len(x[0])
        means = {name: sums[name] / len(data[0]) for name in layers}
        return correct_output_means(graph, adapter, means, data, batch_size, observed=point_of)

    fit = [s[0::2] for s in samples]
    judge = [s[1::2] for s in samples] if len(samples[0]) > 1 else fit
    other = copy.deepcopy(graph)
    analytic(other, kernels)
    install_kernels(other, adapter, kernels)
    install_kernels(graph, adapter, kernels)
    trained = {name: graph.node(name).weights.get(adapter.bias_attr(graph.node(name))) for name in layers}
    corrected = measured(fit)
    candidates = [adapter.fake_quantized_model(graph), adapter.fake_quantized_model(other)]
    errors = dict(zip(("measured", "analytic"), adapter.relative_output_errors(
        backend.float_model, candidates, _batches(judge, batch_size), len(judge[0]))))
    if errors["analytic"] < errors["measured"]:  # (ties: measured, as min over the dict's order)
        restore_biases(graph, adapter, {name: other.node(name).weights.get(adapter.bias_attr(other.node(name)))
                                        for name in layers})
    elif judge is not fit:  # measured it is: fit again on every sample (half the data left ~2 dB on the table),
        restore_biases(graph, adapter, trained)  # from the trained biases: the secant steps depend on the start
        measured(samples)
    chosen = "analytic" if errors["analytic"] < errors["measured"] else "measured"
    return {"bias_correction": chosen, "bias_corrected": corrected, "output_error": errors}


def _batches(samples: Sequence[Any], batch_size: int) -> List[List[Any]]:
    return [[s[i:i + batch_size] for s in samples] for i in range(0, len(samples[0]), batch_size)]


def run_gptq(state: Any, backend: GPTQBackend, cfg: GradientPTQConfig, batches: List[List[Any]]) -> Dict[str, Any]:
    """The facades' GPTQ after PTQ (``state``: PTQ's pipeline state, its float graph kept): train on
    ``batches`` (the GPTQ data, one list of arrays per batch), with the analytic bias correction of PTQ's
    statistics as the measured one's rival; the trained graph becomes the state's graph. Returns
    UserInformation.gptq_info_dict."""
    from hwquant.core.passes.bias_correction import apply_bias_correction

    batch_size = training_batch_size(batches)
    samples = [backend.ops.concat([b[k] for b in batches]) for k in range(len(batches[0]))]
    info = gptq_train(state.float_graph, backend, cfg, samples, batch_size,
                      analytic_correction=lambda graph, kernels: apply_bias_correction(
                          graph, state.adapter, state.statistics, quantized_kernels=kernels))
    state.graph, state.float_graph = state.float_graph, None
    state.report.bias_corrected = len(info["bias_corrected"])
    return info


def gptq_user_information(state: Any, adapter: Any, info_dict: Dict[str, Any], start: float) -> Any:
    """The facades' UserInformation (``gptq_info_dict``: ``run_gptq``'s, empty without GPTQ), the time said."""
    from hwquant.core.pipeline.facade_steps import user_information

    info = user_information(state, adapter)
    info.gptq_info_dict = info_dict
    log.info("gradient-based post-training quantization of %s took %.1f s", state.graph.name, time.perf_counter() - start)
    return info


def check_same_steps(collective: Collective, n_samples: int, batch_size: int) -> None:
    """Across processes every rank must take the same steps: as many samples, in batches of one size
    (the global batch is world_size times it)."""
    if not collective.distributed:
        return
    replies = collective.exchange((n_samples, batch_size), "starting GPTQ")
    if len(set(replies)) > 1:
        raise DistributedError(f"GPTQ needs every rank to train the same steps, but the ranks' data have (samples, "
                               f"batch size) {replies}: give every rank as many samples in batches of one size "
                               "(DistributedSampler with drop_last=True, or hwquant.torch.distributed.shard)")


def agree_with_rank_0(collective: Collective, graph: Graph, names: List[str]) -> None:
    """Every rank ends with rank 0's trained layers. The averaged gradients make them equal already; should
    float reductions on different hardware leave them apart, rank 0's weights are taken, and it is said."""
    def state(name: str) -> tuple:
        node = graph.node(name)
        params = {a: w.weights_quantization_params for a, w in node.final_config.weights_quantization_cfg.attrs.items()}
        return node.weights, params

    mine = fingerprint(*[np.asarray(w) for name in names for w in state(name)[0].values()],
                       repr([state(name)[1] for name in names]))
    prints = collective.exchange(mine, "comparing the GPTQ results")
    if len(set(prints)) == 1:
        return
    log.info("GPTQ: the ranks' trained weights differ by float rounding (fingerprints %s): every rank takes rank 0's",
             prints)
    first = collective.exchange({name: state(name) for name in names} if collective.rank == 0 else None,
                                "taking rank 0's GPTQ results")[0]
    for name, (weights, params) in first.items():
        node = graph.node(name)
        for attr, value in weights.items():
            node.set_weight(attr, value)
        for attr, p in params.items():
            node.final_config.weights_quantization_cfg.attrs[attr].weights_quantization_params = p


def training_batch_size(batches: Sequence[Sequence[Any]]) -> int:
    """The GPTQ data's batch size, after checking its samples have one size (GPTQ shuffles samples)."""
    if not batches:
        raise InvalidConfigError("the GPTQ representative data yielded no batch")
    sizes = {tuple(tuple(t.shape[1:]) for t in b) for b in batches}
    if len(sizes) > 1:
        raise InvalidConfigError(f"GPTQ trains on shuffled samples of one size, but its data has batches of "
                                 f"{len(sizes)} sizes ({sorted(sizes)[:3]}...): give gptq_representative_data_gen "
                                 "batches of one size (resize or crop); the calibration data may keep its sizes")
    return len(batches[0][0])
