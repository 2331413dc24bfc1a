"""mct.pruning.pytorch_pruning_experimental and pruning's PyTorch back end: the float model built from the
graph, the output's gradients with respect to the entry layers' kernels (LFH), the pruned model built back."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Sequence, Tuple

import numpy as np
import torch

from hwquant.concurrency import framework_call
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization
from hwquant.core.graph.model_graph import Graph
from hwquant.pruning.config import PruningConfig, PruningInfo
from hwquant.pruning.pruner import check_arguments, prune
from hwquant.torch.facade import DEFAULT_PYTORCH_TPC
from hwquant.torch.builder import build_module
from hwquant.torch.session import start_session


class TorchPruningBackend:
    def __init__(self, graph: Graph, adapter: Any, tpc: Any, data: Any):
        self.graph, self.adapter, self.tpc, self.data = graph, adapter, tpc, data
        self._model: Any = None

    def kernel_gradients(self, sample: Sequence[torch.Tensor], entries: Sequence[str], probes: int,
                         rng: np.random.Generator) -> Iterator[Dict[str, np.ndarray]]:
        if self._model is None:
            self._model = build_module(self.graph).to(self.adapter.device).eval()
        placed = self._model.meta["hwquant_placement"]
        kernels = [getattr(self._model, placed[e]["layer"]).weight for e in entries]
        with torch.enable_grad():
            for k in kernels:
                k.requires_grad_(True)
            outputs = [o for o in torch.utils._pytree.tree_leaves(self._model(*sample))
                       if isinstance(o, torch.Tensor) and o.is_floating_point()]
            for p in range(probes):
                projection = sum((o * torch.as_tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype,
                                                      device=o.device)).sum() for o in outputs)
                grads = torch.autograd.grad(projection, kernels, retain_graph=p < probes - 1, allow_unused=True)
                yield {e: np.zeros(tuple(k.shape)) if g is None else g.detach().cpu().numpy()
                       for e, k, g in zip(entries, kernels, grads)}

    def build(self, graph: Graph) -> torch.nn.Module:
        model = build_module(graph).to(self.adapter.device).eval()
        for parameter in model.parameters():  # (the float build freezes them; a pruned model is fine-tuned)
            parameter.requires_grad_(True)
        return model


@framework_call
def pytorch_pruning_experimental(model: torch.nn.Module, target_resource_utilization: ResourceUtilization,
                                 representative_data_gen: Callable[[], Any],
                                 pruning_config: PruningConfig = PruningConfig(),
                                 target_platform_capabilities: Any = DEFAULT_PYTORCH_TPC
                                 ) -> Tuple[torch.nn.Module, PruningInfo]:
    """Remove whole output channels (in SIMD groups of the TPC) until the float32 weights take at most
    ``target_resource_utilization.weights_memory`` bytes: (a smaller model, built anew as a GraphModule with
    the same inputs and outputs, its parameters trainable; what was done). The model passed is not changed;
    when it already meets the target it is returned as it is."""
    check_arguments(target_resource_utilization, pruning_config)
    session = start_session(model, representative_data_gen, CoreConfig(), target_platform_capabilities)
    backend = TorchPruningBackend(session.graph, session.adapter, session.state.tpc, session.data)
    graph, info = prune(backend, target_resource_utilization, pruning_config)
    return (model if graph is None else backend.build(graph)), info
