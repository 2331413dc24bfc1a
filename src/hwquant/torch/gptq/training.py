"""GPTQ training for PyTorch: learn how each quantized kernel rounds so that the quantized model's
activations at the interest points follow the float model's, on unlabelled representative data.

Two models are built from the PTQ graphs: the float teacher (the graph before bias correction) and
the student, the quantized model with a GPTQ weight quantizer on every quantized kernel and frozen
straight-through activation quantizers (optionally eased in by gradual activation quantization).
Interest points: the output of every layer whose kernel trains, taken where it is quantized, before its
activation quantizer: after the activation fused into it, if any (a ReLU's negative side is lost anyway,
and the fused output is the tensor the next layers see).
The loss compares them, weighted by Hessian-based scores (per point, or per sample and point:
sample-layer attention), plus the soft-rounding regulariser. After training, the learned weights
(on the grid), biases and, if learned, quantization parameters are written into the graph, from which
the ordinary quantized model is built, with a bias correction for the learned rounding where the
configuration asks for one (torch/gptq/bias_correction.py).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from torch import nn

from hwquant.core.graph import Graph, Node
from hwquant.errors import InvalidConfigError
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.schedules import linear_annealing, regularization_beta
from hwquant.logger import progress
from hwquant.torch.builder import build_module
from hwquant.torch.gptq.bias_correction import AnalyticCorrection, correct_biases
from hwquant.torch.gptq.hessian import activation_hessian_scores
from hwquant.torch.gptq.loss import multiple_tensors_mse_loss, sample_layer_attention_loss
from hwquant.torch.gptq.quantizers import BasePytorchGPTQTrainableQuantizer
from hwquant.torch.output_mean_correction import channel_axis
from hwquant.torch.trainable import BasePytorchTrainableQuantizer
from hwquant.torch.trainable.model import TrainableQuantizerFactory, build_trainable_model, trainable_quantizer_classes
from hwquant.trainable_infrastructure.common import TrainingMethod, VariableGroup
from hwquant.trainable_infrastructure.node_configs import trainable_activation_config, trainable_weights_config

log = logging.getLogger("hwquant.gptq")

# The float teacher's interest-point activations are kept for every sample, computed once, when they
# fit in a quarter of the memory free on the device, or in this many bytes if that is more; otherwise
# the teacher runs at every step (about a fifth of a step's time on MobileNetV2).
TEACHER_CACHE_BYTES = 1 << 30
TEACHER_CACHE_SHARE_OF_FREE_MEMORY = 0.25


def _free_memory(device: torch.device) -> Optional[int]:
    """Bytes free on ``device`` (host memory for the CPU; None where it cannot be told)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def teacher_cache_budget(device: torch.device) -> int:
    free = _free_memory(torch.device(device))
    return max(TEACHER_CACHE_BYTES, int(TEACHER_CACHE_SHARE_OF_FREE_MEMORY * free) if free else 0)


class GradualActivationQuantizer(nn.Module):
    """``x + f (q(x) - x)``: the quantized fraction ``f`` of an activation quantizer's output, set by
    the GPTQ loop at each step (gradual activation quantization)."""

    def __init__(self, quantizer: nn.Module):
        super().__init__()
        self.quantizer = quantizer
        self.q_fraction = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.q_fraction >= 1:
            return self.quantizer(x)
        if self.q_fraction <= 0:
            return x
        return x + self.q_fraction * (self.quantizer(x) - x)

    def grid(self):
        return self.quantizer.grid()

    def initialize_quantization(self, tensor_shape, name: str = "", layer=None) -> None:
        self.quantizer.initialize_quantization(tensor_shape, name, layer)


@dataclass
class _Student:
    model: nn.Module
    kernels: List[tuple]  # (node, wrapper, kernel attribute, quantizer) per interest point, in graph order
    gradual: List[GradualActivationQuantizer] = field(default_factory=list)


def _build_student(graph: Graph, adapter: Any, cfg: GradientPTQConfig) -> _Student:
    """The student; its interest points are the layers whose kernel is quantized (each gets a GPTQ
    quantizer), in graph order."""
    override = cfg.gptq_quantizer_params_override
    weights, activations = trainable_quantizer_classes(
        graph, adapter.kernel_attr, (cfg.rounding_type, BasePytorchGPTQTrainableQuantizer, override),
        (TrainingMethod.STE, BasePytorchTrainableQuantizer, {}), "GPTQ")
    points = list(weights)
    gradual: List[GradualActivationQuantizer] = []

    def make_weights(node: Node, attr: str) -> BasePytorchGPTQTrainableQuantizer:
        q = weights[node.name](trainable_weights_config(node, attr), **override)
        q.init_rounding(torch.as_tensor(np.asarray(node.weights[attr], np.float32)))
        return q

    def make_activation(node: Node) -> nn.Module:
        q = activations[node.name](trainable_activation_config(node), freeze_quant_params=True)
        if cfg.gradual_activation_quantization_config is None:
            return q
        gradual.append(GradualActivationQuantizer(q))
        return gradual[-1]

    model = build_trainable_model(graph, TrainableQuantizerFactory(adapter.kernel_attr, make_weights, make_activation),
                                  adapter.device, extra_outputs=[interest_point(graph.node(n)) for n in points])
    placement = model.meta["hwquant_placement"]
    kernels = []
    for name in points:
        node = graph.node(name)
        wrapper = model.get_submodule(placement[name]["layer"])
        attr = adapter.kernel_attr(node)
        kernels.append((node, wrapper, attr, wrapper.weights_quantizers[attr]))
    return _Student(model, kernels, gradual)


def interest_point(layer: Node) -> str:
    """The node whose output is ``layer``'s interest point: the end of its fused group, else itself."""
    return layer.fused_into or layer.name


def _make_optimizer(spec: Any, params: List[nn.Parameter], what: str) -> torch.optim.Optimizer:
    """A fresh optimizer over ``params`` from the config's ``spec``: an optimizer (its class and
    settings; the given instance is left alone), an optimizer class, or a factory of params."""
    if isinstance(spec, torch.optim.Optimizer):
        return type(spec)(params, **spec.defaults)
    if isinstance(spec, type) and issubclass(spec, torch.optim.Optimizer) or callable(spec):
        opt = spec(params)
        if isinstance(opt, torch.optim.Optimizer):
            return opt
    raise InvalidConfigError(f"GradientPTQConfig.{what} must be a torch.optim.Optimizer (e.g. "
                             f"torch.optim.Adam([torch.zeros(0)], lr=1e-2)), an optimizer class or a function of the "
                             f"parameters returning one; got {spec!r}")


def _optimizers(cfg: GradientPTQConfig, student: _Student) -> List[torch.optim.Optimizer]:
    """MCT's grouping: ``optimizer`` for the rounding variables; the biases with ``optimizer_bias`` (else
    ``optimizer_rest``); learned quantization parameters with ``optimizer_quantization_parameter``
    (else ``optimizer_rest``)."""
    rounding = [p for *_, q in student.kernels for p in q.get_trainable_variables(VariableGroup.WEIGHTS)]
    biases = [w.layer.bias for _, w, _, _ in student.kernels
              if cfg.train_bias and isinstance(getattr(w.layer, "bias", None), nn.Parameter)]
    qparams = [p for *_, q in student.kernels for p in q.get_trainable_variables(VariableGroup.QPARAMS)]
    for p in student.model.parameters():
        p.requires_grad_(False)
    for p in rounding + biases + qparams:
        p.requires_grad_(True)
    out = [_make_optimizer(cfg.optimizer, rounding, "optimizer")]
    rest: List[nn.Parameter] = []
    for params, own, name in ((biases, cfg.optimizer_bias, "optimizer_bias"),
                              (qparams, cfg.optimizer_quantization_parameter, "optimizer_quantization_parameter")):
        if params and own is not None:
            out.append(_make_optimizer(own, params, name))
        else:
            rest += params
    if rest:
        if cfg.optimizer_rest is None:
            raise InvalidConfigError("training the biases or the quantization parameters needs GradientPTQConfig."
                                     "optimizer_rest (or optimizer_bias / optimizer_quantization_parameter)")
        out.append(_make_optimizer(cfg.optimizer_rest, rest, "optimizer_rest"))
    return out


def _loss_weights(cfg: GradientPTQConfig, teacher: nn.Module, samples: List[torch.Tensor],
                  points: List[Node]) -> tuple:
    """(loss weights: (points,) or (samples, points) for sample-layer attention; regulariser weights (points,))."""
    h = cfg.hessian_weights_config
    n_points = len(points)
    if h is None:
        return torch.full((n_points,), 1.0 / n_points), torch.ones(n_points)
    n = len(samples[0]) if h.per_sample or h.hessians_num_samples is None else min(h.hessians_num_samples, len(samples[0]))
    if not h.per_sample and h.hessians_num_samples is not None and h.hessians_num_samples > len(samples[0]):
        log.info("GPTQ Hessian scores: %d samples asked, the data has %d", h.hessians_num_samples, len(samples[0]))
    batches = [[t[i:i + h.hessian_batch_size] for t in samples] for i in range(0, n, h.hessian_batch_size)]
    scores = activation_hessian_scores(teacher, batches, [channel_axis(p) for p in points], h.per_sample).cpu()
    if h.per_sample:
        return scores, scores.mean(0)
    scores = scores.double()
    if h.norm_scores:
        scores = scores / (scores.sum(1, keepdim=True) + 1e-12)
    mean = scores.mean(0)
    if h.log_norm:
        positive = mean[mean > 0]
        mean = torch.where(mean > 0, mean, positive.min() if len(positive) else torch.ones(()))
        logs = torch.log10(mean)
        span = logs.max() - logs.min()
        mean = (logs - logs.min()) / span if h.scale_log_norm and span > 0 else logs - logs.min()
    return mean.float(), torch.ones(n_points)


def _teacher_outputs(teacher: nn.Module, x: List[torch.Tensor]) -> List[torch.Tensor]:
    with torch.no_grad():
        return [t.detach() for t in teacher(*x)[1]]


def gptq_train(graph: Graph, adapter: Any, cfg: GradientPTQConfig, samples: List[torch.Tensor], batch_size: int,
               analytic_correction: AnalyticCorrection, seed: int = 0) -> Dict[str, Any]:
    """Run GPTQ on ``graph``, a quantized graph with its float weights and biases (PTQ's graph before
    bias correction), in place: the learned kernels, biases and parameters are written into its nodes,
    with a bias correction for the learned rounding (torch/gptq/bias_correction.py: measured, or
    ``analytic_correction``, whichever leaves the output closer to the float model's on the samples).
    The float teacher is built from it too.
    ``samples``: one tensor per model input holding every training sample. Returns the run's
    information (UserInformation.gptq_info_dict).

    Why the float biases: soft rounding starts at the float kernels, so the biases that go with them
    are the float ones (bias correction compensates nearest rounding, which GPTQ replaces; starting
    from corrected biases the optimiser spends its steps undoing the correction through the rounding).
    """
    start = time.perf_counter()
    student = _build_student(graph, adapter, cfg)
    if not student.kernels:
        raise InvalidConfigError("GPTQ found no quantized kernel to train (every layer's kernel quantization is "
                                 "disabled): use post-training quantization instead")
    names = [node.name for node, *_ in student.kernels]
    point_of = {name: interest_point(graph.node(name)) for name in names}
    teacher = build_module(graph, None, extra_outputs=list(point_of.values())).to(adapter.device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    optimizers = _optimizers(cfg, student)
    n_samples = len(samples[0])
    steps_per_epoch = -(-n_samples // batch_size)
    total_steps = cfg.n_epochs * steps_per_epoch

    loss_weights, reg_weights = _loss_weights(cfg, teacher, samples, [n for n, *_ in student.kernels])
    per_sample = loss_weights.dim() == 2
    loss_fn = cfg.loss or (sample_layer_attention_loss if per_sample else multiple_tensors_mse_loss)
    hessian_seconds = time.perf_counter() - start
    loss_weights, reg_weights = loss_weights.to(adapter.device), reg_weights.to(adapter.device)

    soft = [q for *_, q in student.kernels]
    beta = regularization_beta(total_steps)
    fraction = None
    if cfg.gradual_activation_quantization_config is not None:
        a = cfg.gradual_activation_quantization_config.q_fraction_scheduler_policy
        fraction = linear_annealing(a.start_step, a.end_step or total_steps, a.initial_q_fraction, a.target_q_fraction)

    cache = _teacher_cache(teacher, samples, batch_size)

    gen = torch.Generator().manual_seed(seed)
    losses: List[float] = []
    step = 0
    student.model.train()
    epochs = progress(range(cfg.n_epochs), "GPTQ epochs")
    for _ in epochs:
        order = torch.randperm(n_samples, generator=gen)
        for i in progress(range(0, n_samples, batch_size), "GPTQ steps", total=steps_per_epoch):
            idx = order[i:i + batch_size]
            dev_idx = idx.to(adapter.device)
            x = [s[dev_idx] for s in samples]
            target = [t[dev_idx] for t in cache] if cache is not None else _teacher_outputs(teacher, x)
            if fraction is not None:
                f = fraction(step)
                for g in student.gradual:
                    g.q_fraction = f
            _, points = student.model(*x)
            kernels_q = kernels_f = None
            if cfg.loss is not None:  # a user's loss may look at the kernels
                kernels_q = [[q(w.float_weight(a))] for _, w, a, q in student.kernels]
                kernels_f = [[w.float_weight(a)] for _, w, a, _ in student.kernels]
            weights = loss_weights[dev_idx] if per_sample else loss_weights
            loss = loss_fn(points, target, kernels_q, kernels_f, [None] * len(points), [None] * len(points), weights)
            if cfg.regularization_factor:
                reg = sum(w * q.rounding_regularization(beta(step)) for w, q in zip(reg_weights, soft))
                loss = loss + cfg.regularization_factor * reg / reg_weights.max().clamp_min(1e-30)
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in optimizers:
                opt.step()
            value = float(loss.detach())
            if not np.isfinite(value):
                raise InvalidConfigError(f"GPTQ diverged at step {step} (loss {value}): lower the learning rates "
                                         f"or the regularization factor")
            losses.append(value)
            if cfg.log_function is not None:
                rounding = [p for q in soft for p in q.get_trainable_variables(VariableGroup.WEIGHTS)]
                cfg.log_function(value, [None if p.grad is None else p.grad.detach().cpu().numpy() for p in rounding],
                                 [p.detach().cpu().numpy() for p in rounding])
            if hasattr(epochs, "set_postfix"):
                epochs.set_postfix(loss=f"{value:.4g}")
            step += 1
    training_seconds = time.perf_counter() - start - hessian_seconds
    teacher_cached, cache = cache is not None, None  # free it for the bias correction
    kernels = _write_back(student, cfg, adapter)
    wanted = [k for k in names if graph.node(k).final_config.weights_quantization_cfg.weights_bias_correction]
    correction = correct_biases(graph, adapter, kernels, analytic_correction, wanted, point_of, teacher, samples, batch_size)
    log.info("GPTQ: %d kernels, %d steps, loss %.4g -> %.4g (Hessian scores %.1f s, training %.1f s, "
             "bias correction (%s) %.1f s)", len(names), step, losses[0], losses[-1], hessian_seconds, training_seconds,
             correction["bias_correction"], time.perf_counter() - start - hessian_seconds - training_seconds)
    return {"losses": losses, "steps": step, "epochs": cfg.n_epochs, "trained_layers": names,
            "interest_points": list(point_of.values()), "hessian_seconds": hessian_seconds,
            "training_seconds": training_seconds, "rounding_type": cfg.rounding_type.name,
            "teacher_cached": teacher_cached, **correction}


def _teacher_cache(teacher: nn.Module, samples: List[torch.Tensor], batch_size: int) -> Optional[List[torch.Tensor]]:
    """The teacher's interest-point activations for every sample, when they fit teacher_cache_budget."""
    n = len(samples[0])
    first = _teacher_outputs(teacher, [s[:batch_size] for s in samples])
    per_sample = sum(t.numel() * t.element_size() for t in first) / len(first[0])
    if per_sample * n > teacher_cache_budget(first[0].device):
        return None
    rest = (_teacher_outputs(teacher, [s[i:i + batch_size] for s in samples]) for i in range(batch_size, n, batch_size))
    return [torch.cat(parts) for parts in zip(first, *rest)]


@torch.no_grad()
def _write_back(student: _Student, cfg: GradientPTQConfig, adapter: Any) -> Dict[str, np.ndarray]:
    """The learned biases and quantization parameters into the graph's nodes; returns the learned
    kernels ({layer: kernel on the grid}): the analytic bias correction reads the float kernels first."""
    from hwquant.core.node_params import set_bias
    kernels = {}
    for node, wrapper, attr, q in student.kernels:
        if q.quantization_parameter_learning:
            node.final_config.weights_quantization_cfg.attrs[attr].weights_quantization_params.update(q.inferable_params())
        kernels[node.name] = q.quantized_weights(wrapper.float_weight(attr)).cpu().numpy().astype(np.float32)
        bias = getattr(wrapper.layer, "bias", None)
        if cfg.train_bias and isinstance(bias, nn.Parameter) and adapter.bias_attr(node) in node.weights:
            set_bias(node, adapter, bias.detach().cpu().numpy())
    return kernels


def training_samples(batches: List[List[torch.Tensor]]) -> tuple:
    """(one tensor per input holding every sample, the batch size of the data)."""
    if not batches:
        raise InvalidConfigError("the GPTQ representative data yielded no batch")
    sizes = {tuple(tuple(t.shape[1:]) for t in b) for b in batches}
    if len(sizes) > 1:
        raise InvalidConfigError(f"GPTQ trains on shuffled samples of one size, but its data has batches of "
                                 f"{len(sizes)} sizes ({sorted(sizes)[:3]}...): give gptq_representative_data_gen "
                                 "batches of one size (resize or crop); the calibration data may keep its sizes")
    samples = [torch.cat([b[k] for b in batches]) for k in range(len(batches[0]))]
    return samples, len(batches[0][0])

