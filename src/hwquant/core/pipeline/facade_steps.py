"""What every framework's facade does the same way: MCT's debug bypass, the resource-target check and
the UserInformation a run returns (read from the pipeline's report)."""
from __future__ import annotations

from typing import Any, Optional

from hwquant.core.configuration.config import RU_FIELDS, ResourceUtilization, UserInformation
from hwquant.errors import InvalidConfigError


def debug_bypass(core_config: Any) -> bool:
    """``DebugConfig(bypass=True)``: quantization is skipped and the input model returned as it is."""
    debug = getattr(core_config, "debug_config", None)
    return bool(getattr(debug, "bypass", False))


def check_target(target: Optional[ResourceUtilization]) -> None:
    if target is None:
        return
    if not isinstance(target, ResourceUtilization):
        raise InvalidConfigError(f"target_resource_utilization must be a ResourceUtilization, got {type(target).__name__}")


def user_information(state: Any, adapter: Any) -> UserInformation:
    """What a quantization run reports: resource utilization, mixed-precision choice, input scale."""
    from hwquant.core.pipeline.resource_utilization import final_config, resource_utilization_against_float

    info = UserInformation()
    final, info.float_resource_utilization = resource_utilization_against_float(state.graph, final_config, adapter)
    info.resource_utilization = final
    target = getattr(state, "target", None)
    if target is not None and target.is_any_restricted():
        # MCT's report: the figures of the restricted targets, the others left unset (inf); no target, None
        figures = final.get_resource_utilization_dict()
        info.final_resource_utilization = ResourceUtilization(**{
            RU_FIELDS[t]: figures[t] for t in target.get_restricted_targets()})
    report = state.report
    if report.mixed_precision is not None:
        info.mixed_precision_cfg = report.mixed_precision.choice
        info.mixed_precision_bit_widths = report.mixed_precision.bit_widths
    info.float_layers = dict(report.float_layers)
    info.unmatched_bit_widths = list(report.unmatched_bit_widths)
    scales = report.input_scale
    if scales:
        info.input_scale = next(iter(scales.values())) if len(scales) == 1 else dict(scales)
    return info
