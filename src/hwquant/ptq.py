"""`mct.ptq`: post-training quantization facades."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from hwquant.core.config import RU_FIELDS, CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.model_metadata import quantization_metadata
from hwquant.errors import InvalidConfigError
from hwquant.logger import progress
from hwquant.tpc.platforms import get_target_platform_capabilities

log = logging.getLogger("hwquant.ptq")
DEFAULT_PYTORCH_TPC = get_target_platform_capabilities()


def debug_bypass(core_config: Any) -> bool:
    """``DebugConfig(bypass=True)``: quantization is skipped and the input model returned as it is."""
    debug = getattr(core_config, "debug_config", None)
    return bool(getattr(debug, "bypass", False))


def _check_target(target: Optional[ResourceUtilization]) -> None:
    if target is None:
        return
    if not isinstance(target, ResourceUtilization):
        raise InvalidConfigError(f"target_resource_utilization must be a ResourceUtilization, got {type(target).__name__}")


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
    from hwquant.torch.metadata import attach_metadata

    if debug_bypass(core_config):  # MCT's debug switch: the float model back, before any check
        return in_module, None
    start = time.perf_counter()
    session, state = run_pytorch_ptq(in_module, representative_data_gen, target_resource_utilization, core_config,
                                     target_platform_capabilities)
    model = session.adapter.build(state.graph, quantized=True).eval()
    attach_metadata(model, quantization_metadata(session.state.tpc, core_config, "pytorch", "ptq"))
    log.info("post-training quantization of %s took %.1f s (%d fused groups, %d batch-norms folded)",
             state.graph.name, time.perf_counter() - start, len(state.fused_groups),
             state.report.get("folded_batch_norms", 0))
    return model, user_information(state, session.adapter)


def run_pytorch_ptq(in_module: Any, representative_data_gen: Callable[[], Any],
                    target_resource_utilization: Optional[ResourceUtilization], core_config: CoreConfig,
                    target_platform_capabilities: Any, keep_float_graph: bool = False):
    """The PTQ pipeline on a PyTorch model: (session, final pipeline state). QAT and GPTQ start here too
    (GPTQ keeps the float graph, its teacher: see ``run_ptq``)."""
    from hwquant.core.pipeline import run_ptq
    from hwquant.torch.session import start_session

    _check_target(target_resource_utilization)
    session = start_session(in_module, representative_data_gen, core_config, target_platform_capabilities)
    session.state.target = target_resource_utilization
    return session, run_ptq(session.state, session.data, progress, keep_float_graph)


def user_information(state: Any, adapter: Any) -> UserInformation:
    """What a quantization run reports: resource utilization, mixed-precision choice, input scale."""
    from hwquant.core.resource_utilization import compute_resource_utilization, final_config

    info = UserInformation()
    target = getattr(state, "target", None)
    if target is not None and target.is_any_restricted():
        # MCT's report: the figures of the restricted targets, the others left unset (inf); no target, None
        figures = compute_resource_utilization(state.graph, final_config, adapter).get_resource_utilization_dict()
        info.final_resource_utilization = ResourceUtilization(**{
            RU_FIELDS[t]: figures[t] for t in target.get_restricted_targets()})
    if state.report.get("mixed_precision_choice") is not None:
        info.mixed_precision_cfg = state.report["mixed_precision_choice"]
        info.mixed_precision_bit_widths = state.report["mixed_precision"]["bit_widths"]
    info.float_layers = dict(state.report.get("float_layers") or {})
    scales = state.report.get("input_scale") or {}
    if scales:
        info.input_scale = next(iter(scales.values())) if len(scales) == 1 else dict(scales)
    return info


def __getattr__(name: str) -> Any:
    # the Keras facade loads keras on first use: `import hwquant` needs neither keras nor tensorflow
    if name == "keras_post_training_quantization":
        from hwquant.keras.facade import keras_post_training_quantization
        return keras_post_training_quantization
    raise AttributeError(f"module 'hwquant.ptq' has no attribute {name!r}")
