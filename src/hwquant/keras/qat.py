"""`mct.qat` for Keras 3: build a trainable quantized model from PTQ, and finalize it after training."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from hwquant.concurrency import KERAS_LOCK
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.pipeline.facade_steps import user_information
from hwquant.core.pipeline.model_metadata import quantization_metadata
from hwquant.errors import InvalidConfigError
from hwquant.keras.facade import run_keras_ptq
from hwquant.keras.trainable import BaseKerasTrainableQuantizer
from hwquant.keras.trainable.model import TrainableBlocks, build_trainable_model, convert_to_inferable
from hwquant.qat.config import QATConfig
from hwquant.trainable_infrastructure.node_configs import QATQuantizers

log = logging.getLogger("hwquant.qat")


def keras_quantization_aware_training_init_experimental(
        in_model: Any, representative_data_gen: Callable[[], Any],
        target_resource_utilization: Optional[ResourceUtilization] = None, core_config: CoreConfig = CoreConfig(),
        qat_config: QATConfig = QATConfig(), target_platform_capabilities: Any = None
) -> Tuple[Any, UserInformation, dict]:
    """Quantize ``in_model`` (a Keras 3 functional or Sequential model, any backend) with post-training
    quantization, then make its quantizers trainable.

    Every quantized layer's kernel gets a trainable weight quantizer and every quantized activation a
    trainable activation quantizer (``qat_config`` picks STE or LSQ), initialised with the PTQ
    parameters: before training, the model gives the PTQ model's outputs.

    Returns:
        (model, UserInformation, custom_objects), as MCT returns them. The model is a functional
        ``keras.Model``: ``compile`` and ``fit`` it, or train it with your own step; ``model.save`` /
        ``keras.saving.load_model`` work mid-training (``custom_objects`` is only needed by code that
        does not import hwquant). Then call :func:`keras_quantization_aware_training_finalize_experimental`.
    """
    if not isinstance(qat_config, QATConfig):
        raise InvalidConfigError(f"qat_config must be a QATConfig, got {type(qat_config).__name__}")
    refuse_untrained_backend("quantization-aware training")
    start = time.perf_counter()
    with KERAS_LOCK:
        _, state = run_keras_ptq(in_model, representative_data_gen, target_resource_utilization, core_config,
                                 target_platform_capabilities)
        adapter = state.adapter
        quantizers = QATQuantizers(state.graph, adapter.kernel_attr, qat_config, BaseKerasTrainableQuantizer)
        model = build_trainable_model(state.graph, TrainableBlocks(adapter.kernel_attr, quantizers.weights,
                                                                   quantizers.activation))
    model.hwquant_metadata = quantization_metadata(state.tpc, core_config, "keras", "qat")
    log.info("QAT model of %s ready in %.1f s (%s)", state.graph.name, time.perf_counter() - start, quantizers)
    return model, user_information(state, adapter), custom_objects()


def keras_quantization_aware_training_finalize_experimental(in_model: Any) -> Any:
    """The inferable quantized model of a trained QAT model: each trainable quantizer becomes the fixed
    quantizer of its learned grid and each kernel is stored quantized, so the result gives bitwise the
    trained model's inference outputs and exports like any PTQ model. ``in_model`` is left as it is:
    training can go on after finalizing at an intermediate epoch, and finalizing it again gives the same model."""
    with KERAS_LOCK:
        model = convert_to_inferable(in_model)
    metadata = dict(getattr(in_model, "hwquant_metadata", None) or {})
    model.hwquant_metadata = {**metadata, "method": "qat"}
    return model


def refuse_untrained_backend(what: str) -> None:
    """QAT and GPTQ train on Keras' torch and TensorFlow backends. On JAX the trainer calls the model
    statelessly, and the trainable wrapper's own stateless scope inside that one is not supported."""
    import keras

    if keras.backend.backend() not in ("torch", "tensorflow"):
        raise InvalidConfigError(f"{what} runs on Keras' torch and tensorflow backends, not on "
                                 f"'{keras.backend.backend()}': set KERAS_BACKEND to one of them")


def custom_objects() -> dict:
    """The quantization classes by name, for ``keras.saving.load_model(..., custom_objects=...)``."""
    import keras

    from hwquant.keras import quantizers
    from hwquant.keras.trainable import quantizers as trainable

    return {name: obj for module in (quantizers, trainable) for name, obj in vars(module).items()
            if isinstance(obj, type) and issubclass(obj, (keras.layers.Layer, quantizers.KerasInferableQuantizer,
                                                          BaseKerasTrainableQuantizer)) and obj.__module__ == module.__name__}
