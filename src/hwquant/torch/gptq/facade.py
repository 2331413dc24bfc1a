"""`mct.gptq.pytorch_gradient_post_training_quantization`: post-training quantization, then GPTQ."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from torch import nn

from hwquant.concurrency import framework_call
from hwquant.core.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.facade_common import debug_bypass, user_information
from hwquant.core.model_metadata import quantization_metadata
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.training import check_gptq_arguments, run_gptq
from hwquant.torch.data import RepresentativeData, check_same_input_shapes
from hwquant.torch.facade import DEFAULT_PYTORCH_TPC, run_pytorch_ptq
from hwquant.torch.gptq.backend import TorchGPTQBackend
from hwquant.torch.metadata import attach_metadata

log = logging.getLogger("hwquant.gptq")


@framework_call
def pytorch_gradient_post_training_quantization(
        model: Any, representative_data_gen: Callable[[], Any],
        target_resource_utilization: Optional[ResourceUtilization] = None, core_config: CoreConfig = CoreConfig(),
        gptq_config: Optional[GradientPTQConfig] = None, gptq_representative_data_gen: Optional[Callable[[], Any]] = None,
        target_platform_capabilities: Any = DEFAULT_PYTORCH_TPC) -> Tuple[nn.Module, UserInformation]:
    """Quantize ``model`` with post-training quantization, then optimise the rounding of every quantized
    kernel (and its bias) so that the quantized model's activations follow the float model's on
    ``gptq_representative_data_gen`` (default: ``representative_data_gen``); no labels are needed.

    ``gptq_config`` None runs post-training quantization only (as MCT documents); get one from
    :func:`hwquant.gptq.get_pytorch_gptq_config`. Runs on the device the model is on.

    Returns:
        (quantized model, UserInformation with ``gptq_info_dict``: the loss at every step, the steps,
        the interest points, the time spent on Hessian scores and on training). The model is the same
        kind of module post-training quantization returns (saves, exports, simulates the integer kernels).
    """
    if debug_bypass(core_config):  # MCT's debug switch: the float model back, before any check
        return model, None
    check_gptq_arguments(gptq_config, gptq_representative_data_gen, "get_pytorch_gptq_config")
    start = time.perf_counter()
    session, state = run_pytorch_ptq(model, representative_data_gen, target_resource_utilization, core_config,
                                     target_platform_capabilities, keep_float_graph=gptq_config is not None)
    info_dict = {}
    if gptq_config is None:
        log.info("no gptq_config: post-training quantization only")
    else:
        batches = list(RepresentativeData(gptq_representative_data_gen or representative_data_gen,
                                          n_inputs=session.data.n_inputs, device=session.adapter.device, model=model))
        if session.data.uniform_shapes:  # calibrated on one size: GPTQ data of another size is a mistake
            check_same_input_shapes(batches[0], [n.output_shape for n in state.graph.input_nodes],
                                    "gptq_representative_data_gen")
        info_dict = run_gptq(state, TorchGPTQBackend(session.adapter), gptq_config, batches)
    quantized = session.adapter.build(state.graph, quantized=True).eval()
    attach_metadata(quantized, quantization_metadata(session.state.tpc, core_config, "pytorch",
                                                     "gptq" if gptq_config is not None else "ptq", state))
    info = user_information(state, session.adapter)
    info.gptq_info_dict = info_dict
    log.info("gradient-based post-training quantization of %s took %.1f s", state.graph.name, time.perf_counter() - start)
    return quantized, info
