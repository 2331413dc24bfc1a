"""`mct.gptq.get_keras_gptq_config`: a GradientPTQConfig with Keras 3 optimizers and MCT 2.6's defaults
(the rest of the defaults: gptq/config.py)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import keras

from hwquant.gptq.config import (ACT_HESSIAN_DEFAULT_BATCH_SIZE, BIAS_MOMENTUM, LR_BIAS_DEFAULT, LR_DEFAULT,
                                 LR_REST_DEFAULT, GradientPTQConfig, GradualActivationQuantizationConfig,
                                 gptq_config_with_defaults)


def get_keras_gptq_config(n_epochs: int, optimizer: Optional[Any] = None, optimizer_rest: Optional[Any] = None,
                          loss: Optional[Callable] = None, log_function: Optional[Callable] = None,
                          use_hessian_based_weights: bool = True, regularization_factor: Optional[float] = None,
                          hessian_batch_size: int = ACT_HESSIAN_DEFAULT_BATCH_SIZE,
                          use_hessian_sample_attention: bool = True,
                          gradual_activation_quantization: Union[bool, GradualActivationQuantizationConfig] = True
                          ) -> GradientPTQConfig:
    """A GradientPTQConfig for Keras models: Adam (lr 3e-2) for the rounding variables, Adam (lr 1e-4) for
    the rest, SGD (lr 1e-4, momentum 0.9) for the biases; Hessian-based loss weights, per sample
    (sample-layer attention) by default; gradual activation quantization on by default. The optimizers
    given are copied (class and settings) for the variables they train. ``loss`` None takes the default
    loss of the chosen weighting (gptq/loss.py)."""
    for name, value in (("optimizer", optimizer), ("optimizer_rest", optimizer_rest)):
        if value is not None and not isinstance(value, keras.optimizers.Optimizer):
            raise TypeError(f"{name} must be a keras.optimizers.Optimizer (e.g. keras.optimizers.Adam(learning_rate=1e-2)) "
                            f"or None, got {type(value).__module__}.{type(value).__name__}")
    return gptq_config_with_defaults(
        n_epochs, optimizer or keras.optimizers.Adam(learning_rate=LR_DEFAULT),
        optimizer_rest or keras.optimizers.Adam(learning_rate=LR_REST_DEFAULT),
        keras.optimizers.SGD(learning_rate=LR_BIAS_DEFAULT, momentum=BIAS_MOMENTUM), loss, log_function,
        use_hessian_based_weights, regularization_factor, hessian_batch_size, use_hessian_sample_attention,
        gradual_activation_quantization)
