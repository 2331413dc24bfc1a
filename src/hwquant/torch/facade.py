"""The PyTorch facades: `mct.ptq.pytorch_post_training_quantization` and
`mct.core.pytorch_resource_utilization_data`."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from hwquant.concurrency import framework_call
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.pipeline.facade_steps import check_target, debug_bypass, user_information
from hwquant.core.pipeline.model_metadata import quantization_metadata
from hwquant.logger import progress
from hwquant.tpc.platforms import get_target_platform_capabilities

log = logging.getLogger("hwquant.ptq")
DEFAULT_PYTORCH_TPC = get_target_platform_capabilities()


@framework_call
def pytorch_post_training_quantization(in_module: Any, representative_data_gen: Callable[[], Any],
                                       target_resource_utilization: Optional[ResourceUtilization] = None,
                                       core_config: CoreConfig = CoreConfig(),
                                       target_platform_capabilities: Any = DEFAULT_PYTORCH_TPC) -> Tuple[Any, UserInformation]:
    """Quantize a float PyTorch model for the target platform.

    Args:
        in_module: the float `torch.nn.Module` (not modified).
        representative_data_gen: zero-argument callable returning an iterator of lists of tensors,
            one tensor per model input (batched).
        target_resource_utilization: resource targets for mixed precision (None: single precision).
        core_config: the quantization process configuration.
        target_platform_capabilities: a TPC object or the path of a TPC JSON file.

    Returns:
        (quantized model, UserInformation). The quantized model is an `nn.Module` whose weighted layers
        carry weight quantizers and whose quantized activations pass through activation quantizers.
    """
    from hwquant.torch.deployment.metadata import attach_metadata

    if debug_bypass(core_config):  # MCT's debug switch: the float model back, before any check
        return in_module, None
    start = time.perf_counter()
    session, state = run_pytorch_ptq(in_module, representative_data_gen, target_resource_utilization, core_config,
                                     target_platform_capabilities)
    model = session.adapter.build(state.graph, quantized=True).eval()
    attach_metadata(model, quantization_metadata(session.state.tpc, core_config, "pytorch", "ptq", state))
    log.info("post-training quantization of %s took %.1f s (%d fused groups, %d batch-norms folded)",
             state.graph.name, time.perf_counter() - start, len(state.fused_groups),
             state.report.folded_batch_norms)
    return model, user_information(state, session.adapter)


def run_pytorch_ptq(in_module: Any, representative_data_gen: Callable[[], Any],
                    target_resource_utilization: Optional[ResourceUtilization], core_config: CoreConfig,
                    target_platform_capabilities: Any, keep_float_graph: bool = False):
    """The PTQ pipeline on a PyTorch model: (session, final pipeline state). QAT and GPTQ start here too
    (GPTQ keeps the float graph, its teacher: see ``run_ptq``)."""
    from hwquant.core.pipeline.stages import run_ptq
    from hwquant.torch.session import start_session

    check_target(target_resource_utilization)
    session = start_session(in_module, representative_data_gen, core_config, target_platform_capabilities)
    session.state.target = target_resource_utilization
    return session, run_ptq(session.state, session.data, progress, keep_float_graph)


@framework_call
def pytorch_resource_utilization_data(in_model: Any, representative_data_gen: Callable[[], Any],
                                      core_config: CoreConfig = CoreConfig(),
                                      target_platform_capabilities: Any = DEFAULT_PYTORCH_TPC) -> ResourceUtilization:
    """Weights memory, activation memory, total memory (bytes) and BOPs of `in_model` quantized with
    every node at its TPC base config (the single-precision model; MCT's figures, of which users
    take fractions as mixed-precision targets). Weights memory counts the quantized weights only."""
    from hwquant.core.pipeline.stages import prepare
    from hwquant.core.pipeline.resource_utilization import base_config, compute_resource_utilization
    from hwquant.torch.session import start_session

    session = start_session(in_model, representative_data_gen, core_config, target_platform_capabilities)
    prepare(session.state)
    return compute_resource_utilization(session.graph, base_config, session.adapter)
