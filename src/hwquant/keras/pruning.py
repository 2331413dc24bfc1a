"""mct.pruning.keras_pruning_experimental and pruning's Keras back end (torch and tensorflow backends): the
float model built from the graph, the output's gradients with respect to the entry layers' kernels (LFH),
the pruned model built back."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Sequence, Tuple

import keras
import numpy as np

from hwquant.concurrency import KERAS_LOCK
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization
from hwquant.core.graph.model_graph import Graph
from hwquant.keras.builder import build_model
from hwquant.keras.gradients import variable_gradients
from hwquant.pruning.config import PruningConfig, PruningInfo
from hwquant.pruning.pruner import check_arguments, prune


class KerasPruningBackend:
    def __init__(self, graph: Graph, adapter: Any, tpc: Any, data: Any):
        self.graph, self.adapter, self.tpc, self.data = graph, adapter, tpc, data
        self._model: Any = None

    def kernel_gradients(self, sample: Sequence[np.ndarray], entries: Sequence[str], probes: int,
                         rng: np.random.Generator) -> Iterator[Dict[str, np.ndarray]]:
        if self._model is None:
            self._model = build_model(self.graph)
        kernels = [self._model.get_layer(e).kernel for e in entries]
        for _ in range(probes):  # (one forward pass per probe: Keras has no backend-neutral retained graph)
            _, grads = variable_gradients(self._projection(sample, rng), kernels, "pruning's LFH importance metric")
            yield {e: keras.ops.convert_to_numpy(g) for e, g in zip(entries, grads)}

    def _projection(self, sample: Sequence[np.ndarray], rng: np.random.Generator) -> Callable[[], Any]:
        """sum(v * outputs), v ~ N(0, 1) drawn once, on the first evaluation."""
        vectors: list = []

        def projection():
            outputs = keras.tree.flatten(self._model(list(sample), training=False))
            if not vectors:
                vectors.extend(rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outputs)
            return sum(keras.ops.sum(o * keras.ops.convert_to_tensor(v)) for o, v in zip(outputs, vectors))
        return projection

    def build(self, graph: Graph) -> Any:
        return build_model(graph)


def keras_pruning_experimental(model: Any, target_resource_utilization: ResourceUtilization,
                               representative_data_gen: Callable[[], Any],
                               pruning_config: PruningConfig = PruningConfig(),
                               target_platform_capabilities: Any = None) -> Tuple[Any, PruningInfo]:
    """Remove whole output channels (in SIMD groups of the TPC) until the float32 weights take at most
    ``target_resource_utilization.weights_memory`` bytes: (a smaller functional model with the same inputs and
    outputs, built anew, trainable; what was done). The model passed is not changed; when it already meets the
    target it is returned as it is."""
    from hwquant.keras.session import start_session

    check_arguments(target_resource_utilization, pruning_config)
    with KERAS_LOCK:
        session = start_session(model, representative_data_gen, CoreConfig(), target_platform_capabilities)
        backend = KerasPruningBackend(session.graph, session.adapter, session.state.tpc, session.data)
        graph, info = prune(backend, target_resource_utilization, pruning_config)
        return (model if graph is None else backend.build(graph)), info
