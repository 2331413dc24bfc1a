"""`mct.core.pytorch_resource_utilization_data`: the resource figures of a model at its TPC's base
(single-precision) configs, as MCT computes them."""
from __future__ import annotations

from typing import Any, Callable

from hwquant.core.config import CoreConfig, ResourceUtilization
from hwquant.core.pipeline import prepare
from hwquant.core.resource_utilization import base_config, compute_resource_utilization
from hwquant.tpc.platforms import get_target_platform_capabilities


def pytorch_resource_utilization_data(in_model: Any, representative_data_gen: Callable[[], Any],
                                      core_config: CoreConfig = CoreConfig(),
                                      target_platform_capabilities: Any = get_target_platform_capabilities()
                                      ) -> ResourceUtilization:
    """Weights memory, activation memory, total memory (bytes) and BOPs of `in_model` quantized with
    every node at its TPC base config (the single-precision model; MCT's figures, of which users
    take fractions as mixed-precision targets). Weights memory counts the quantized weights only."""
    from hwquant.torch.session import start_session

    session = start_session(in_model, representative_data_gen, core_config, target_platform_capabilities)
    prepare(session.state)
    return compute_resource_utilization(session.graph, base_config, session.adapter)
