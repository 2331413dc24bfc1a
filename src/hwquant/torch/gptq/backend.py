"""PyTorch's back end of the GPTQ loop (gptq/training.py): the student and teacher models, torch's tensor
operations for the framework-free losses, the optimizers and their step, the Hessian scores' vector-Jacobian
products (scored by gptq/hessian.py)."""
from __future__ import annotations

import copy
from functools import partial
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from hwquant.core.graph.model_graph import Graph, Node
from hwquant.core.mixed_precision.sensitivity import compared_outputs
from hwquant.gptq import loss
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.hessian import HESSIAN_ITERATIONS, probed_scores
from hwquant.gptq.training import GPTQBackend, StudentQuantizers, fresh_optimizer
from hwquant.torch.array_namespace import OPS
from hwquant.torch.builder import build_module
from hwquant.torch.gptq.quantizers import BasePytorchGPTQTrainableQuantizer
from hwquant.torch.output_error import flat_tensors
from hwquant.torch.trainable import BasePytorchTrainableQuantizer
from hwquant.torch.trainable.model import TrainableQuantizerFactory, build_trainable_model


multiple_tensors_mse_loss = partial(loss.multiple_tensors_mse_loss, OPS)  # MCT's default losses, on torch tensors
sample_layer_attention_loss = partial(loss.sample_layer_attention_loss, OPS)


class GradualActivationQuantizer(nn.Module):
    """``x + f (q(x) - x)``: the quantized fraction ``f`` of an activation quantizer's output, set by the
    GPTQ loop at each step (gradual activation quantization)."""

    def __init__(self, quantizer: nn.Module):
        super().__init__()
        self.quantizer, self.q_fraction = quantizer, 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.q_fraction >= 1:
            return self.quantizer(x)
        return x if self.q_fraction <= 0 else x + self.q_fraction * (self.quantizer(x) - x)

    def grid(self):
        return self.quantizer.grid()

    def initialize_quantization(self, tensor_shape, name: str = "", layer=None) -> None:
        self.quantizer.initialize_quantization(tensor_shape, name, layer)


def activation_hessian_scores(model: nn.Module, batches: List[List[torch.Tensor]], channel_axes: Sequence[int],
                              per_channel: bool, iterations: int = HESSIAN_ITERATIONS) -> np.ndarray:
    """(samples, points) scores for the float ``model`` returning ``(outputs, [points])``: Hutchinson's
    estimator, one backward pass per random vector (gptq/hessian.py says what it estimates)."""
    gen: List[torch.Generator] = []

    def probe_gradients(batch):
        inputs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in batch]
        with torch.enable_grad():
            outputs, points = model(*inputs)
            out = torch.cat([t.flatten(1) if t.dim() > 1 else t[:, None] for t in flat_tensors(outputs)
                             if t.is_floating_point()], 1)
            gen[:] = gen or [torch.Generator(device=out.device).manual_seed(0)]
            for _ in range(iterations):
                v = torch.randint(0, 2, out.shape, generator=gen[0], device=out.device).to(out.dtype) * 2 - 1
                grads = torch.autograd.grad((out * v).sum(), points, retain_graph=True, allow_unused=True)
                yield [None if g is None else g.detach().float().cpu().numpy() for g in grads]
    return probed_scores(batches, probe_gradients, channel_axes, per_channel)


class TorchGPTQBackend(GPTQBackend):
    ops = OPS

    def __init__(self, adapter: Any):
        self.adapter, self.device = adapter, adapter.device

    def build(self, graph: Graph, cfg: GradientPTQConfig, samples: Sequence[Any]) -> List[Node]:
        """The student: every layer whose kernel is quantized gets a GPTQ quantizer (its interest points, in
        graph order); the teacher: the float model returning those points too."""
        self.graph, self.samples = graph, list(samples)
        made = StudentQuantizers(graph, self.adapter, cfg, BasePytorchGPTQTrainableQuantizer,
                                 BasePytorchTrainableQuantizer, GradualActivationQuantizer, torch.as_tensor)
        self.layers, self.points, self.gradual = made.layers, made.points, made.gradual
        self.student = build_trainable_model(graph, TrainableQuantizerFactory(self.adapter.kernel_attr, made.weights,
                                                                              made.activation),
                                             self.device, extra_outputs=self.points).train()
        placement = self.student.meta["hwquant_placement"]
        self.wrappers = [self.student.get_submodule(placement[node.name]["layer"]) for node in self.layers]
        self.quantizers = made.kernels
        self.teacher = build_module(graph, None, extra_outputs=self.points).to(self.device).eval().requires_grad_(False)
        self.float_model = build_module(graph, None).to(self.device).eval()
        return self.layers

    def hessian_scores(self, n_samples: int, batch_size: int, per_sample: bool) -> np.ndarray:
        model, outputs = self.teacher, compared_outputs(self.graph)
        if outputs != self.graph.output_names():  # a model ending in a custom operator (an NMS layer): its inputs
            view = copy.copy(self.graph)
            view.outputs = tuple(outputs)
            model = build_module(view, None, extra_outputs=self.points).to(self.device).eval()
        axes = [-1 if isinstance(node.call_target, nn.Linear) else 1 for node in self.layers]
        batches = [[s[i:min(i + batch_size, n_samples)] for s in self.samples] for i in range(0, n_samples, batch_size)]
        return activation_hessian_scores(model, batches, axes, per_sample)

    @torch.no_grad()
    def teacher_points(self, inputs: List[Any]) -> List[Any]:
        return [t.detach() for t in self.teacher(*inputs)[1]]

    def student_points(self, inputs: List[Any]) -> List[Any]:
        return list(self.student(*inputs)[1])

    def kernels(self) -> tuple:
        attrs = [self.adapter.kernel_attr(node) for node in self.layers]
        floats = [[w.float_weight(a)] for w, a in zip(self.wrappers, attrs)]
        return [[q(f[0])] for q, f in zip(self.quantizers, floats)], floats

    def trained_biases(self, train_bias: bool) -> List[Any]:
        return [w.layer.bias for w in self.wrappers if train_bias and isinstance(getattr(w.layer, "bias", None),
                                                                             nn.Parameter)]

    def make_optimizers(self, groups: List[tuple]) -> None:
        self.student.requires_grad_(False)
        for *_, params in groups:
            for p in params:
                p.requires_grad_(True)
        self.optimizers = [fresh_optimizer(spec, name, torch.optim.Optimizer, lambda o, p=params: type(o)(p, **o.defaults),
                                           lambda f, p=params: f(p), "torch.optim.Optimizer (e.g. torch.optim.Adam("
                                           "[torch.zeros(0)], lr=1e-2))") for spec, name, params in groups]
        self.rounding = groups[0][2]

    def train_step(self, loss: Callable[[], Any]) -> float:
        value = loss()
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        value.backward()
        value = value.detach().clone().reshape(1)
        collective = self.adapter.collective
        if collective.distributed:  # the gradient of the global batch's loss: the ranks' gradients averaged
            grads = [p.grad for opt in self.optimizers for group in opt.param_groups for p in group["params"]
                     if p.grad is not None]
            collective.average_(grads + [value], "the GPTQ gradients")
        for opt in self.optimizers:
            opt.step()
        return float(value[0])

    def set_quantized_fraction(self, fraction: float) -> None:
        for g in self.gradual:
            g.q_fraction = fraction

    def gather_samples(self, samples: List[Any]) -> List[Any]:
        everyone = self.adapter.collective.exchange(samples, "gathering the GPTQ samples")
        return [torch.cat(parts).to(self.device) for parts in zip(*everyone)]

    def rounding_state(self) -> tuple:
        return ([None if p.grad is None else p.grad.detach().cpu().numpy() for p in self.rounding],
                [p.detach().cpu().numpy() for p in self.rounding])

    @torch.no_grad()
    def learned(self, train_bias: bool) -> List[tuple]:
        out = []
        for node, wrapper, q in zip(self.layers, self.wrappers, self.quantizers):
            kernel = q.quantized_weights(wrapper.float_weight(self.adapter.kernel_attr(node)))
            bias = getattr(wrapper.layer, "bias", None)
            keep_bias = train_bias and isinstance(bias, nn.Parameter) and self.adapter.bias_attr(node) in node.weights
            out.append((kernel.cpu().numpy().astype(np.float32), bias.detach().cpu().numpy() if keep_bias else None))
        return out

    def free_memory(self) -> Optional[int]:
        return int(torch.cuda.mem_get_info(self.device)[0]) if self.device.type == "cuda" else super().free_memory()

