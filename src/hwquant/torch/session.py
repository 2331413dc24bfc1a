"""The steps every PyTorch facade starts with: check the arguments, read the TPC, wrap the
representative data, capture the model (a copy: the user's model is never modified)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from hwquant.core.configuration.config import CoreConfig
from hwquant.core.graph.model_graph import Graph
from hwquant.core.pipeline.state import PipelineState
from hwquant.errors import InvalidConfigError
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.capture.routes import capture
from hwquant.torch.data import RepresentativeData, RepresentativeDataError, check_positional_inputs
from hwquant.tpc.serialization import load_target_platform_capabilities


@dataclass
class PytorchSession:
    state: PipelineState
    data: RepresentativeData
    adapter: PytorchAdapter

    @property
    def graph(self) -> Graph:
        return self.state.graph


def check_model_tensors(model: torch.nn.Module) -> None:
    """A model on the meta device, or with half / double precision weights, is refused up front (torch
    would fail deep inside capture or calibration)."""
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_meta:
            raise InvalidConfigError(f"the model's tensor '{name}' is on the meta device (not materialised): load its "
                                     "weights first, e.g. model.to_empty(device='cpu') then model.load_state_dict(...)")
        if t.is_floating_point() and t.dtype != torch.float32:
            raise InvalidConfigError(f"the model's tensor '{name}' is {str(t.dtype).removeprefix('torch.')}: hwquant "
                                     "quantizes float32 models (the quantized model simulates integer arithmetic in "
                                     "float32); pass model.float() (representative data may stay float16)")


def check_not_torchscript(model: torch.nn.Module) -> None:
    """A TorchScript module (torch.jit.script / torch.jit.trace) has compiled methods, no Python forward
    to trace (torch.fx failed on it with "no signature found for <torch.ScriptMethod>")."""
    if isinstance(model, torch.jit.ScriptModule):
        how = "torch.jit.trace" if isinstance(model, torch.jit.TracedModule) else "torch.jit.script"
        raise InvalidConfigError(
            f"the model is a TorchScript module ({type(model).__name__}, made by {how}), which hwquant cannot "
            "capture: it needs the Python torch.nn.Module (its layers and forward). Pass the original model, before "
            f"{how}, e.g. build it from its class and load_state_dict(torch.jit.load(path).state_dict())")
    inner = next((name for name, m in model.named_modules() if isinstance(m, torch.jit.ScriptModule)), None)
    if inner is not None:
        raise InvalidConfigError(
            f"the model's submodule '{inner}' is a TorchScript module ({type(model.get_submodule(inner)).__name__}), "
            "which hwquant cannot capture (its forward is compiled, not Python): put the original torch.nn.Module "
            "there, before torch.jit.script / torch.jit.trace")


def start_session(in_module: Any, representative_data_gen: Callable[[], Any], core_config: Any,
                  target_platform_capabilities: Any) -> PytorchSession:
    if not isinstance(in_module, torch.nn.Module):
        raise TypeError(f"the model must be a torch.nn.Module, got {type(in_module).__name__}")
    check_not_torchscript(in_module)
    if not isinstance(core_config, CoreConfig):
        raise InvalidConfigError(f"core_config must be a CoreConfig, got {type(core_config).__name__}")
    check_model_tensors(in_module)
    tpc = load_target_platform_capabilities(target_platform_capabilities)
    if in_module.training:
        warnings.warn("the model is in training mode: quantizing its eval-mode behaviour (batch-norm running "
                      "statistics, no dropout); the model you passed is not changed", stacklevel=3)
    device = next((p.device for p in in_module.parameters()), torch.device("cpu"))
    data = RepresentativeData(representative_data_gen, device=device, model=in_module)
    example = data.first_batch()
    if data.input_names is None:
        check_positional_inputs(in_module, len(example))
    graph = capture(in_module, example)
    if len(graph.input_nodes) != len(example):
        raise RepresentativeDataError(f"the model takes {len(graph.input_nodes)} input(s) "
                                      f"({[n.name for n in graph.input_nodes]}) but representative batches hold "
                                      f"{len(example)}; yield one tensor per model input")
    data.n_inputs = len(example)
    adapter = PytorchAdapter(device=device)
    return PytorchSession(PipelineState(graph, core_config, adapter, tpc), data, adapter)
