"""The steps every Keras facade starts with (as torch/session.py for PyTorch): check the arguments, read the
TPC, wrap the representative data, capture the model (the user's model is never modified)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from hwquant.core.configuration.config import CoreConfig
from hwquant.core.graph.model_graph import Graph
from hwquant.core.pipeline.state import PipelineState
from hwquant.errors import InvalidConfigError
from hwquant.keras.adapter import KerasAdapter
from hwquant.keras.capture import capture, functional_of
from hwquant.keras.data import KerasRepresentativeData
from hwquant.tpc import get_target_platform_capabilities
from hwquant.tpc.serialization import load_target_platform_capabilities


@dataclass
class KerasSession:
    state: PipelineState
    data: KerasRepresentativeData
    adapter: KerasAdapter

    @property
    def graph(self) -> Graph:
        return self.state.graph


def keep_output_structure(graph: Graph, in_model: Any) -> None:
    """Give the graph the model's own output structure (a dict of heads, nested lists): the capture lists
    the outputs flat, in keras.tree's order, and a quantized model returning that list would hand a dict
    model's heads back in sorted-key order, unnamed."""
    import keras

    struct = getattr(functional_of(in_model), "_outputs_struct", None)
    if not isinstance(struct, (dict, list, tuple)) or \
            (isinstance(struct, list) and not any(isinstance(s, (dict, list, tuple)) for s in struct)):
        return  # one tensor, or a flat list: the capture's form already
    flat = graph.outputs if isinstance(graph.outputs, list) else [graph.outputs]
    if len(keras.tree.flatten(struct)) == len(flat):
        graph.outputs = keras.tree.pack_sequence_as(struct, flat)


def start_session(in_model: Any, representative_data_gen: Callable[[], Any], core_config: Any,
                  target_platform_capabilities: Any) -> KerasSession:
    """The caller holds KERAS_LOCK."""
    if not isinstance(core_config, CoreConfig):
        raise InvalidConfigError(f"core_config must be a CoreConfig, got {type(core_config).__name__}")
    tpc = load_target_platform_capabilities(target_platform_capabilities or get_target_platform_capabilities())
    data = KerasRepresentativeData(representative_data_gen)
    example = data.first_batch()
    graph = capture(in_model, example)
    keep_output_structure(graph, in_model)
    data.n_inputs = len(example)
    adapter = KerasAdapter(graph)
    return KerasSession(PipelineState(graph, core_config, adapter, tpc), data, adapter)
