"""The Keras facades: `mct.ptq.keras_post_training_quantization`, `mct.core.keras_resource_utilization_data`,
`mct.keras_load_quantized_model`."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from hwquant.concurrency import KERAS_LOCK, keras_call
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.pipeline.facade_steps import check_target, debug_bypass, user_information
from hwquant.core.pipeline.model_metadata import quantization_metadata
from hwquant.errors import InvalidConfigError

log = logging.getLogger("hwquant.keras")


def keras_post_training_quantization(in_model: Any, representative_data_gen: Callable[[], Any],
                                     target_resource_utilization: Optional[ResourceUtilization] = None,
                                     core_config: CoreConfig = CoreConfig(),
                                     target_platform_capabilities: Any = None) -> Tuple[Any, Optional[UserInformation]]:
    """Post-training quantization of a Keras 3 functional or Sequential model (any backend).

    Returns (quantized keras.Model, UserInformation): weighted layers wrapped in KerasQuantizationWrapper,
    quantized activations through KerasActivationQuantizationHolder layers.
    """
    if debug_bypass(core_config):
        return in_model, None
    start = time.perf_counter()
    with KERAS_LOCK:
        _, state = run_keras_ptq(in_model, representative_data_gen, target_resource_utilization, core_config,
                                 target_platform_capabilities)
        # (the bias-correction judge's model is this graph's quantized model: no second build)
        model = state.judged_model if state.judged_model is not None else state.adapter.build(state.graph, quantized=True)
    model.hwquant_metadata = quantization_metadata(state.tpc, core_config, "keras", "ptq", state)
    log.info("post-training quantization of %s took %.1f s", state.graph.name, time.perf_counter() - start)
    return model, user_information(state, state.adapter)


def run_keras_ptq(in_model: Any, representative_data_gen: Callable[[], Any],
                  target_resource_utilization: Optional[ResourceUtilization], core_config: CoreConfig,
                  target_platform_capabilities: Any, keep_float_graph: bool = False) -> Tuple[Any, Any]:
    """The PTQ pipeline on a Keras model: (session, final pipeline state); the caller holds KERAS_LOCK. QAT
    and GPTQ start here too (GPTQ keeps the float graph, its teacher: see ``run_ptq``)."""
    from hwquant.core.pipeline.stages import run_ptq
    from hwquant.keras.session import start_session

    check_target(target_resource_utilization)
    session = start_session(in_model, representative_data_gen, core_config, target_platform_capabilities)
    session.state.target = target_resource_utilization
    return session, run_ptq(session.state, session.data, keep_float_graph=keep_float_graph)


def keras_resource_utilization_data(in_model: Any, representative_data_gen: Callable[[], Any],
                                    core_config: CoreConfig = CoreConfig(),
                                    target_platform_capabilities: Any = None) -> ResourceUtilization:
    """The resource figures of `in_model` with every node at its TPC base config (MCT's definitions,
    as pytorch_resource_utilization_data)."""
    from hwquant.core.pipeline.stages import prepare
    from hwquant.core.pipeline.resource_utilization import base_config, compute_resource_utilization

    from hwquant.keras.session import start_session

    with KERAS_LOCK:
        session = start_session(in_model, representative_data_gen, core_config, target_platform_capabilities)
        prepare(session.state)
        return compute_resource_utilization(session.graph, base_config, session.adapter)


@keras_call
def keras_load_quantized_model(filepath: Any, custom_objects: Any = None, compile: bool = True,
                               options: Any = None, *, safe_mode: bool = True) -> Any:
    """A quantized Keras model saved with `model.save('....keras')`, with hwquant's quantization
    layers and quantizers, inferable or trainable (saved on one Keras backend, loadable on another).
    MCT's signature: ``custom_objects`` are the user's own classes; ``options`` (a TensorFlow
    SavedModel's LoadOptions) does not apply to `.keras` files and must be None, as in MCT.
    ``safe_mode`` (keyword only; keras.saving.load_model's): True refuses a file holding Python
    bytecode (a Lambda layer's function: UnsafeModelFileError); False runs it, for files you trust."""
    import hwquant.keras.quantizers  # noqa: F401 - registers the quantization layers for deserialisation
    import hwquant.keras.trainable  # noqa: F401 - and the trainable quantizers (a QAT model saved mid-training)
    if options is not None:
        raise InvalidConfigError("options (tf.saved_model.LoadOptions) applies to TensorFlow SavedModel folders; a "
                                 "quantized model is a .keras file, loaded without it: leave options None")
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise InvalidConfigError(f"custom_objects must be a dict {{name: class}} or None, got {type(custom_objects).__name__}")
    from hwquant.keras.model_files import load_keras_model
    return load_keras_model(filepath, trust=not safe_mode, custom_objects=custom_objects, compile=compile)
