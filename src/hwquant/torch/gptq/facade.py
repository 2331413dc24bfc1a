"""MCT's two GPTQ entry points for PyTorch: `mct.gptq.get_pytorch_gptq_config` (MCT 2.6's defaults with torch
optimizers; the rest of the defaults: gptq/config.py) and `mct.gptq.pytorch_gradient_post_training_quantization`
(post-training quantization, then the framework-free loop of gptq/training.py on torch/gptq/backend.py)."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Tuple, Union

import torch
from torch import nn

from hwquant.concurrency import framework_call
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.pipeline.facade_steps import debug_bypass
from hwquant.core.pipeline.model_metadata import quantization_metadata
from hwquant.gptq.config import (ACT_HESSIAN_DEFAULT_BATCH_SIZE, BIAS_MOMENTUM, LR_BIAS_DEFAULT, LR_DEFAULT,
                                 LR_REST_DEFAULT, GradientPTQConfig, GradualActivationQuantizationConfig,
                                 check_given_optimizers, gptq_config_with_defaults)
from hwquant.gptq.training import check_gptq_arguments, gptq_user_information, run_gptq
from hwquant.torch.data import RepresentativeData, check_same_input_shapes
from hwquant.torch.facade import DEFAULT_PYTORCH_TPC, run_pytorch_ptq
from hwquant.torch.gptq.backend import TorchGPTQBackend
from hwquant.torch.deployment.metadata import attach_metadata


def _placeholder_optimizer(cls, **kwargs) -> torch.optim.Optimizer:
    """An optimizer over a dummy tensor: what the API takes, its class and settings reused on the real
    variables (as MCT documents: "other PyTorch optimizers can be passed with dummy params")."""
    return cls([torch.zeros(0, requires_grad=True)], **kwargs)


def get_pytorch_gptq_config(n_epochs: int, optimizer: Optional[torch.optim.Optimizer] = None,
                            optimizer_rest: Optional[torch.optim.Optimizer] = None, loss: Optional[Callable] = None,
                            log_function: Optional[Callable] = None, use_hessian_based_weights: bool = True,
                            regularization_factor: Optional[float] = None,
                            hessian_batch_size: int = ACT_HESSIAN_DEFAULT_BATCH_SIZE,
                            use_hessian_sample_attention: bool = True,
                            gradual_activation_quantization: Union[bool, GradualActivationQuantizationConfig] = True
                            ) -> GradientPTQConfig:
    """A GradientPTQConfig for PyTorch models: Adam (lr 3e-2) for the rounding variables, Adam (lr 1e-4)
    for the rest, SGD (lr 1e-4, momentum 0.9) for the biases; Hessian-based loss weights, per sample
    (sample-layer attention) by default; gradual activation quantization on by default. ``loss`` None
    takes the default loss of the chosen weighting."""
    check_given_optimizers(optimizer, optimizer_rest, torch.optim.Optimizer,
                           "torch.optim.Optimizer (over a dummy tensor, e.g. torch.optim.Adam([torch.zeros(0)], lr=1e-2))")
    return gptq_config_with_defaults(
        n_epochs, optimizer or _placeholder_optimizer(torch.optim.Adam, lr=LR_DEFAULT),
        optimizer_rest or _placeholder_optimizer(torch.optim.Adam, lr=LR_REST_DEFAULT),
        _placeholder_optimizer(torch.optim.SGD, lr=LR_BIAS_DEFAULT, momentum=BIAS_MOMENTUM), loss, log_function,
        use_hessian_based_weights, regularization_factor, hessian_batch_size, use_hessian_sample_attention,
        gradual_activation_quantization)


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
        the interest points, the time spent on Hessian scores and on training, the bias correction chosen).
        The model is the same kind of module post-training quantization returns (saves, exports, simulates
        the integer kernels).
    """
    if debug_bypass(core_config):  # MCT's debug switch: the float model back, before any check
        return model, None
    check_gptq_arguments(gptq_config, gptq_representative_data_gen, "get_pytorch_gptq_config")
    start = time.perf_counter()
    session, state = run_pytorch_ptq(model, representative_data_gen, target_resource_utilization, core_config,
                                     target_platform_capabilities, keep_float_graph=gptq_config is not None)
    info_dict = {}
    if gptq_config is not None:
        batches = list(RepresentativeData(gptq_representative_data_gen or representative_data_gen,
                                          n_inputs=session.data.n_inputs, device=session.adapter.device, model=model))
        if session.data.uniform_shapes:  # calibrated on one size: GPTQ data of another size is a mistake
            check_same_input_shapes(batches[0], [n.output_shape for n in state.graph.input_nodes],
                                    "gptq_representative_data_gen")
        info_dict = run_gptq(state, TorchGPTQBackend(session.adapter), gptq_config, batches)
    quantized = session.adapter.build(state.graph, quantized=True).eval()
    attach_metadata(quantized, quantization_metadata(state.tpc, core_config, "pytorch",
                                                     "gptq" if gptq_config is not None else "ptq", state))
    return quantized, gptq_user_information(state, session.adapter, info_dict, start)
