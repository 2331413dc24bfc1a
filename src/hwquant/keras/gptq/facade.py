"""`mct.gptq.keras_gradient_post_training_quantization`: post-training quantization, then GPTQ."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from hwquant.concurrency import KERAS_LOCK
from hwquant.core.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.facade_common import debug_bypass, user_information
from hwquant.core.model_metadata import quantization_metadata
from hwquant.gptq.config import GradientPTQConfig
from hwquant.gptq.training import check_gptq_arguments, run_gptq
from hwquant.keras.data import KerasRepresentativeData
from hwquant.keras.facade import run_keras_ptq

log = logging.getLogger("hwquant.gptq")


def keras_gradient_post_training_quantization(
        in_model: Any, representative_data_gen: Callable[[], Any], gptq_config: Optional[GradientPTQConfig] = None,
        gptq_representative_data_gen: Optional[Callable[[], Any]] = None,
        target_resource_utilization: Optional[ResourceUtilization] = None, core_config: CoreConfig = CoreConfig(),
        target_platform_capabilities: Any = None) -> Tuple[Any, Optional[UserInformation]]:
    """Quantize a Keras 3 model with post-training quantization, then optimise the rounding of every
    quantized kernel (and its bias) so that the quantized model's activations follow the float model's on
    ``gptq_representative_data_gen`` (default: ``representative_data_gen``); no labels are needed. The
    training loop is PyTorch's (gptq/training.py); gradients on Keras' torch and TensorFlow backends.

    ``gptq_config`` None runs post-training quantization only; get one from
    :func:`hwquant.gptq.get_keras_gptq_config`.

    Returns:
        (quantized keras.Model, UserInformation with ``gptq_info_dict``), the model as post-training
        quantization returns it (saves, exports).
    """
    from hwquant.keras.gptq.backend import KerasGPTQBackend
    from hwquant.keras.qat import refuse_untrained_backend

    if debug_bypass(core_config):
        return in_model, None
    check_gptq_arguments(gptq_config, gptq_representative_data_gen, "get_keras_gptq_config")
    if gptq_config is not None:
        refuse_untrained_backend("GPTQ")
    start = time.perf_counter()
    info_dict = {}
    with KERAS_LOCK:
        session, state = run_keras_ptq(in_model, representative_data_gen, target_resource_utilization, core_config,
                                       target_platform_capabilities, keep_float_graph=gptq_config is not None)
        if gptq_config is None:
            log.info("no gptq_config: post-training quantization only")
            model = state.judged_model  # (PTQ's bias-correction judge built it: no second build)
        else:
            batches = list(KerasRepresentativeData(gptq_representative_data_gen or representative_data_gen,
                                                   n_inputs=session.data.n_inputs))
            info_dict = run_gptq(state, KerasGPTQBackend(session.adapter), gptq_config, batches)
            model = None
        model = model if model is not None else session.adapter.build(state.graph, quantized=True)
    model.hwquant_metadata = quantization_metadata(state.tpc, core_config, "keras",
                                                   "gptq" if gptq_config is not None else "ptq", state)
    info = user_information(state, session.adapter)
    info.gptq_info_dict = info_dict
    log.info("gradient-based post-training quantization of %s took %.1f s", state.graph.name, time.perf_counter() - start)
    return model, info
