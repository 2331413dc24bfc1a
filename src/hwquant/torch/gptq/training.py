"""PyTorch's back end of the GPTQ training loop (gptq/training.py): the student and teacher models,
the optimizers, the loss of one step, the Hessian scores, the teacher's kept activations, the bias
correction's two candidates (torch/gptq/bias_correction.py)."""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from hwquant.core.graph import Graph, Node
from hwquant.core.mixed_precision.sensitivity import compared_outputs
from hwquant.errors import InvalidConfigError
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.training import AnalyticCorrection, GPTQBackend, LearnedLayer, interest_point, optimizer_groups
from hwquant.torch.builder import build_module
from hwquant.torch.gptq.bias_correction import correct_biases
from hwquant.torch.gptq.hessian import activation_hessian_scores
from hwquant.torch.gptq.loss import multiple_tensors_mse_loss, sample_layer_attention_loss
from hwquant.torch.gptq.quantizers import BasePytorchGPTQTrainableQuantizer
from hwquant.torch.output_mean_correction import channel_axis
from hwquant.torch.trainable import BasePytorchTrainableQuantizer
from hwquant.torch.trainable.model import TrainableQuantizerFactory, build_trainable_model
from hwquant.trainable_infrastructure.common import TrainingMethod, VariableGroup
from hwquant.trainable_infrastructure.node_configs import (trainable_activation_config, trainable_quantizer_classes,
                                                          trainable_weights_config)

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
    """The optimizers of MCT's grouping (gptq/training.py: optimizer_groups); only their variables train."""
    rounding = [p for *_, q in student.kernels for p in q.get_trainable_variables(VariableGroup.WEIGHTS)]
    biases = [w.layer.bias for _, w, _, _ in student.kernels
              if cfg.train_bias and isinstance(getattr(w.layer, "bias", None), nn.Parameter)]
    qparams = [p for *_, q in student.kernels for p in q.get_trainable_variables(VariableGroup.QPARAMS)]
    for p in student.model.parameters():
        p.requires_grad_(False)
    for p in rounding + biases + qparams:
        p.requires_grad_(True)
    return [_make_optimizer(spec, params, name) for spec, name, params in optimizer_groups(cfg, rounding, biases, qparams)]


def _teacher_outputs(teacher: nn.Module, x: List[torch.Tensor]) -> List[torch.Tensor]:
    with torch.no_grad():
        return [t.detach() for t in teacher(*x)[1]]


class TorchGPTQBackend(GPTQBackend):
    def __init__(self, adapter: Any, seed: int = 0):
        self.adapter, self.device = adapter, adapter.device
        self.generator = torch.Generator().manual_seed(seed)

    def build(self, graph: Graph, cfg: GradientPTQConfig, samples: Sequence[Any]) -> List[Node]:
        self.graph, self.samples = graph, list(samples)
        self.student = _build_student(graph, self.adapter, cfg)
        layers = [node for node, *_ in self.student.kernels]
        self.teacher = build_module(graph, None, extra_outputs=[interest_point(n) for n in layers]).to(self.device).eval()
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.optimizers = _optimizers(cfg, self.student) if layers else []
        return layers

    def hessian_scores(self, n_samples: int, batch_size: int, per_sample: bool) -> np.ndarray:
        batches = [[t[i:i + batch_size] for t in self.samples] for i in range(0, n_samples, batch_size)]
        axes = [channel_axis(node) for node, *_ in self.student.kernels]
        model, outputs = self.teacher, compared_outputs(self.graph)
        if outputs != self.graph.output_names():  # a model ending in a custom operator (an NMS layer): its inputs
            view = copy.copy(self.graph)
            view.outputs = tuple(outputs)
            points = [interest_point(node) for node, *_ in self.student.kernels]
            model = build_module(view, None, extra_outputs=points).to(self.device).eval()
        return activation_hessian_scores(model, batches, axes, per_sample).cpu().numpy()

    def start(self, cfg: GradientPTQConfig, loss_weights: np.ndarray, regularizer_weights: np.ndarray,
              batch_size: int) -> None:
        self.loss_weights = torch.as_tensor(loss_weights).to(self.device)
        self.reg_weights = torch.as_tensor(regularizer_weights).to(self.device)
        self.per_sample = self.loss_weights.dim() == 2
        self.loss_fn = cfg.loss or (sample_layer_attention_loss if self.per_sample else multiple_tensors_mse_loss)
        self.custom_loss, self.regularization_factor = cfg.loss is not None, cfg.regularization_factor
        self.batch_size = batch_size
        self.cache = self._teacher_cache(batch_size)
        self.teacher_cached = self.cache is not None
        self.student.model.train()

    def shuffle(self, n_samples: int) -> Sequence[Any]:
        return torch.randperm(n_samples, generator=self.generator)

    def set_quantized_fraction(self, fraction: float) -> None:
        for g in self.student.gradual:
            g.q_fraction = fraction

    def step(self, indices: Any, beta: float) -> float:
        dev_idx = indices.to(self.device)
        x = [s[dev_idx] for s in self.samples]
        target = [t[dev_idx] for t in self.cache] if self.cache is not None else _teacher_outputs(self.teacher, x)
        _, points = self.student.model(*x)
        kernels_q = kernels_f = None
        if self.custom_loss:  # a user's loss may look at the kernels
            kernels_q = [[q(w.float_weight(a))] for _, w, a, q in self.student.kernels]
            kernels_f = [[w.float_weight(a)] for _, w, a, _ in self.student.kernels]
        weights = self.loss_weights[dev_idx] if self.per_sample else self.loss_weights
        loss = self.loss_fn(points, target, kernels_q, kernels_f, [None] * len(points), [None] * len(points), weights)
        if self.regularization_factor:
            soft = [q for *_, q in self.student.kernels]
            reg = sum(w * q.rounding_regularization(beta) for w, q in zip(self.reg_weights, soft))
            loss = loss + self.regularization_factor * reg / self.reg_weights.max().clamp_min(1e-30)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        value = loss.detach().clone().reshape(1)
        collective = self.adapter.collective
        if collective.distributed:  # the gradient of the global batch's loss: the ranks' gradients averaged
            grads = [p.grad for opt in self.optimizers for group in opt.param_groups for p in group["params"]
                     if p.grad is not None]
            collective.average_(grads + [value], "the GPTQ gradients")
        for opt in self.optimizers:
            opt.step()
        return float(value[0])

    def gather_samples(self) -> None:
        everyone = self.adapter.collective.exchange(self.samples, "gathering the GPTQ samples")
        self.samples = [torch.cat(parts).to(self.device) for parts in zip(*everyone)]

    def rounding_state(self) -> tuple:
        rounding = [p for *_, q in self.student.kernels for p in q.get_trainable_variables(VariableGroup.WEIGHTS)]
        return ([None if p.grad is None else p.grad.detach().cpu().numpy() for p in rounding],
                [p.detach().cpu().numpy() for p in rounding])

    def _teacher_cache(self, batch_size: int) -> Optional[List[torch.Tensor]]:
        """The teacher's interest-point activations for every sample, when they fit teacher_cache_budget."""
        samples = self.samples
        n = len(samples[0])
        first = _teacher_outputs(self.teacher, [s[:batch_size] for s in samples])
        per_sample = sum(t.numel() * t.element_size() for t in first) / len(first[0])
        if per_sample * n > teacher_cache_budget(first[0].device):
            return None
        rest = (_teacher_outputs(self.teacher, [s[i:i + batch_size] for s in samples])
                for i in range(batch_size, n, batch_size))
        return [torch.cat(parts) for parts in zip(first, *rest)]

    @torch.no_grad()
    def learned(self, train_bias: bool) -> Dict[str, LearnedLayer]:
        self.cache = None  # free it for the bias correction
        out = {}
        for node, wrapper, attr, q in self.student.kernels:
            bias = getattr(wrapper.layer, "bias", None)
            keep_bias = train_bias and isinstance(bias, nn.Parameter) and self.adapter.bias_attr(node) in node.weights
            out[node.name] = LearnedLayer(
                attr, q.quantized_weights(wrapper.float_weight(attr)).cpu().numpy().astype(np.float32),
                bias.detach().cpu().numpy() if keep_bias else None,
                q.inferable_params() if q.quantization_parameter_learning else None)
        return out

    def correct_biases(self, graph: Graph, kernels: Dict[str, np.ndarray], analytic: AnalyticCorrection,
                       layers: List[str], point_of: Dict[str, str]) -> Dict[str, Any]:
        return correct_biases(graph, self.adapter, kernels, analytic, layers, point_of, self.teacher, self.samples,
                              self.batch_size)


def training_samples(batches: List[List[torch.Tensor]]) -> tuple:
    """(one tensor per input holding every sample, the batch size of the data)."""
    from hwquant.gptq.training import training_batch_size

    batch_size = training_batch_size(batches)
    return [torch.cat([b[k] for b in batches]) for k in range(len(batches[0]))], batch_size
