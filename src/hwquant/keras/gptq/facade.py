"""MCT's two GPTQ entry points for Keras 3: `mct.gptq.get_keras_gptq_config` (MCT 2.6's defaults with Keras
optimizers; the rest of the defaults: gptq/config.py) and `mct.gptq.keras_gradient_post_training_quantization`
(post-training quantization, then the framework-free loop of gptq/training.py on keras/gptq/backend.py)."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple, Union

import keras

from hwquant.concurrency import KERAS_LOCK
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.pipeline.facade_steps import debug_bypass
from hwquant.core.pipeline.model_metadata import quantization_metadata
from hwquant.gptq.config import (ACT_HESSIAN_DEFAULT_BATCH_SIZE, BIAS_MOMENTUM, LR_BIAS_DEFAULT, LR_DEFAULT,
                                 LR_REST_DEFAULT, GradientPTQConfig, GradualActivationQuantizationConfig,
                                 check_given_optimizers, gptq_config_with_defaults)
from hwquant.gptq.training import check_gptq_arguments, gptq_user_information, run_gptq
from hwquant.keras.data import KerasRepresentativeData
from hwquant.keras.facade import run_keras_ptq
from hwquant.keras.trainable.optimizers import TorchAdam

log = logging.getLogger("hwquant.gptq")
# the default optimizers are Adam as torch.optim.Adam computes it, epsilon included (keras/trainable/optimizers.py):
# GPTQ's few steps move the rounding variables of near-zero gradients by lr * g / (|g| + eps), so Keras' own Adam
# learned another rounding than PyTorch GPTQ from the same model
ADAM_EPSILON = 1e-8  # torch.optim.Adam's


def get_keras_gptq_config(n_epochs: int, optimizer: Optional[Any] = None, optimizer_rest: Optional[Any] = None,
                          loss: Optional[Callable] = None, log_function: Optional[Callable] = None,
                          use_hessian_based_weights: bool = True, regularization_factor: Optional[float] = None,
                          hessian_batch_size: int = ACT_HESSIAN_DEFAULT_BATCH_SIZE,
                          use_hessian_sample_attention: bool = True,
                          gradual_activation_quantization: Union[bool, GradualActivationQuantizationConfig] = True
                          ) -> GradientPTQConfig:
    """A GradientPTQConfig for Keras models: Adam (lr 3e-2) for the rounding variables, Adam (lr 1e-4) for the
    rest (both computed as torch.optim.Adam, epsilon 1e-8 included), SGD (lr 1e-4, momentum 0.9) for the
    biases; Hessian-based loss weights, per sample (sample-layer attention) by default; gradual activation
    quantization on by default. The optimizers given are copied (class and settings) for the variables they
    train. ``loss`` None takes the default loss of the chosen weighting (gptq/loss.py)."""
    check_given_optimizers(optimizer, optimizer_rest, keras.optimizers.Optimizer,
                           "keras.optimizers.Optimizer (e.g. keras.optimizers.Adam(learning_rate=1e-2))")
    return gptq_config_with_defaults(
        n_epochs, optimizer or TorchAdam(learning_rate=LR_DEFAULT, epsilon=ADAM_EPSILON),
        optimizer_rest or TorchAdam(learning_rate=LR_REST_DEFAULT, epsilon=ADAM_EPSILON),
        keras.optimizers.SGD(learning_rate=LR_BIAS_DEFAULT, momentum=BIAS_MOMENTUM), loss, log_function,
        use_hessian_based_weights, regularization_factor, hessian_batch_size, use_hessian_sample_attention,
        gradual_activation_quantization)


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
    return model, gptq_user_information(state, session.adapter, info_dict, start)
