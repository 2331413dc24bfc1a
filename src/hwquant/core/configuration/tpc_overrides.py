"""The seed API's QuantizationConfig fields that override the target platform.

`QuantizationConfig(activation_n_bits=6, weights_n_bits=7, ...)` (the older spelling) says how the
model is to be quantized regardless of the TPC; the TPC is rewritten accordingly before the
pipeline reads it, so no later stage has to know about the override.

- activation_quantization_method / activation_n_bits: every operator's activation options;
- weights_quantization_method / weights_n_bits / weights_per_channel_threshold: every kernel
  attribute (the weights the pipeline quantizes);
- enable_activation_quantization / enable_weights_quantization = False: quantization off everywhere
  (True keeps the TPC's choice of which operators are quantized: a reshape stays unquantized).

A bit-width override leaves each operator only its (edited) base option: the user fixed the bit
widths, so there is nothing left for mixed precision to choose. Other overrides edit every option.
"""
from __future__ import annotations

from typing import Any, Dict, List

from hwquant.constants import KERNEL_ATTR
from hwquant.core.configuration.config import QuantizationConfig
from hwquant.tpc.schema import Fusing, OperatorsSet, OpQuantizationConfig, QuantizationConfigOptions, TargetPlatformCapabilities

_ACTIVATION = ("activation_quantization_method", "activation_n_bits")
_FIXES_BIT_WIDTH = {"activation_n_bits", "weights_n_bits"}
_KERNEL = {"weights_quantization_method": "weights_quantization_method", "weights_n_bits": "weights_n_bits",
           "weights_per_channel_threshold": "weights_per_channel_threshold"}


def _edit_config(cfg: OpQuantizationConfig, overrides: Dict[str, Any]) -> OpQuantizationConfig:
    top = {k: overrides[k] for k in _ACTIVATION if k in overrides}
    if overrides.get("enable_activation_quantization") is False:
        top["enable_activation_quantization"] = False
    kernel = {field: overrides[key] for key, field in _KERNEL.items() if key in overrides}
    if overrides.get("enable_weights_quantization") is False:
        kernel["enable_weights_quantization"] = False
    attr_to_edit = {KERNEL_ATTR: kernel} if kernel and KERNEL_ATTR in cfg.attr_weights_configs_mapping else {}
    if overrides.get("enable_weights_quantization") is False:
        # Constants (default weight attribute) are weights too.
        top["default_weight_attr_config"] = cfg.default_weight_attr_config.clone_and_edit(enable_weights_quantization=False)
    return cfg.clone_and_edit(attr_to_edit=attr_to_edit, **top)


def _edit_options(qco: QuantizationConfigOptions, overrides: Dict[str, Any]) -> QuantizationConfigOptions:
    assert qco.base_config is not None  # QuantizationConfigOptions' validator always sets it
    if _FIXES_BIT_WIDTH & set(overrides):
        # Fixed bit widths leave nothing for mixed precision to choose: only the base option remains.
        return QuantizationConfigOptions(quantization_configurations=[_edit_config(qco.base_config, overrides)])
    edited: List[OpQuantizationConfig] = []
    for cfg in qco.quantization_configurations:
        new = _edit_config(cfg, overrides)
        if new not in edited:
            edited.append(new)
    return QuantizationConfigOptions(quantization_configurations=edited, base_config=_edit_config(qco.base_config, overrides))


def apply_quantization_config_overrides(tpc: TargetPlatformCapabilities, qc: QuantizationConfig) -> TargetPlatformCapabilities:
    """The TPC with `qc`'s override fields applied (the same object when `qc` overrides nothing)."""
    overrides = qc.tpc_overrides()
    if not overrides:
        return tpc
    sets = {s.name: OperatorsSet(name=s.name, qc_options=None if s.qc_options is None else _edit_options(s.qc_options, overrides))
            for s in tpc.operator_set or ()}

    def regroup(group):
        if isinstance(group, OperatorsSet):
            return sets[group.name]
        return group.model_copy(update={"operators_set": tuple(sets[s.name] for s in group.operators_set)})

    fusings = tuple(Fusing(operator_groups=tuple(regroup(g) for g in f.operator_groups), name=f.name,
                           fuse_op_quantization_config=None if f.fuse_op_quantization_config is None
                           else _edit_config(f.fuse_op_quantization_config, overrides))
                    for f in tpc.fusing_patterns or ())
    fields = {name: getattr(tpc, name) for name in type(tpc).model_fields}
    fields.update(default_qco=_edit_options(tpc.default_qco, overrides), operator_set=tuple(sets.values()),
                  fusing_patterns=fusings)
    return TargetPlatformCapabilities(**fields)
