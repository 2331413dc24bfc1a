"""Per-node quantization configuration: what the TPC option says, plus the process settings of the
QuantizationConfig, plus (once computed) the quantization parameters.

A node gets one `NodeQuantizationConfig` per option of its TPC operator set (its candidates); the
pipeline picks the final one (the base option, or mixed precision's choice). Field names follow the
documented API so network-editor actions can edit them by name.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from hwquant.constants import MIN_THRESHOLD
from hwquant.core.configuration.config import QuantizationConfig, QuantizationErrorMethod
from hwquant.tpc.enums import QuantizationMethod, Signedness
from hwquant.tpc.schema import AttributeQuantizationConfig, OpQuantizationConfig

WeightKey = Union[str, int]


@dataclass
class ActivationQuantizationConfig:
    """How a node's output is quantized."""

    enable_activation_quantization: bool
    activation_quantization_method: QuantizationMethod
    activation_n_bits: int
    signedness: Signedness = Signedness.AUTO
    quantization_preserving: bool = False
    fixed_scale: Optional[float] = None
    fixed_zero_point: Optional[int] = None
    # process settings (from QuantizationConfig; editable per node)
    activation_error_method: QuantizationErrorMethod = QuantizationErrorMethod.MSE
    l_p_value: int = 2
    min_threshold: float = MIN_THRESHOLD
    z_threshold: float = float("inf")
    # NOCLIPPING on a power-of-two grid may take the power of two below the no-clipping one when that
    # clips the largest magnitude by at most this fraction (set on the model outputs: candidates.py)
    pot_clip_tolerance: float = 0.0
    relu_bound_to_power_of_2: bool = False
    shift_negative_activation_correction: bool = False
    shift_negative_ratio: float = 0.05
    shift_negative_threshold_recalculation: bool = False
    shift_negative_params_search: bool = False
    activation_channel_equalization: bool = False
    input_scaling: bool = False
    concat_threshold_update: bool = False
    # result
    activation_quantization_params: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_tpc(cls, op: OpQuantizationConfig, qc: QuantizationConfig) -> "ActivationQuantizationConfig":
        return cls(enable_activation_quantization=op.enable_activation_quantization,
                   activation_quantization_method=op.activation_quantization_method,
                   activation_n_bits=op.activation_n_bits, signedness=op.signedness,
                   quantization_preserving=op.quantization_preserving, fixed_scale=op.fixed_scale,
                   fixed_zero_point=op.fixed_zero_point, activation_error_method=qc.activation_error_method,
                   l_p_value=qc.l_p_value, min_threshold=qc.min_threshold, z_threshold=qc.z_threshold,
                   relu_bound_to_power_of_2=qc.relu_bound_to_power_of_2,
                   shift_negative_activation_correction=qc.shift_negative_activation_correction,
                   shift_negative_ratio=qc.shift_negative_ratio,
                   shift_negative_threshold_recalculation=qc.shift_negative_threshold_recalculation,
                   shift_negative_params_search=qc.shift_negative_params_search,
                   activation_channel_equalization=qc.activation_channel_equalization,
                   input_scaling=qc.input_scaling, concat_threshold_update=qc.concat_threshold_update)

    @property
    def quantized(self) -> bool:
        """Whether this node's output passes through its own activation quantizer."""
        return self.enable_activation_quantization and not self.quantization_preserving


@dataclass
class WeightsAttrQuantizationConfig:
    """How one weight attribute (kernel, bias, a constant input) is quantized."""

    enable_weights_quantization: bool
    weights_quantization_method: QuantizationMethod
    weights_n_bits: int
    weights_per_channel_threshold: bool
    weights_channels_axis: Optional[int] = None
    weights_error_method: QuantizationErrorMethod = QuantizationErrorMethod.MSE
    l_p_value: int = 2
    lut_values_bitwidth: Optional[int] = None
    weights_quantization_params: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_tpc(cls, attr: AttributeQuantizationConfig, qc: QuantizationConfig,
                 channels_axis: Optional[int]) -> "WeightsAttrQuantizationConfig":
        return cls(enable_weights_quantization=attr.enable_weights_quantization,
                   weights_quantization_method=attr.weights_quantization_method,
                   weights_n_bits=attr.weights_n_bits,
                   weights_per_channel_threshold=attr.weights_per_channel_threshold and channels_axis is not None,
                   weights_channels_axis=channels_axis, weights_error_method=qc.weights_error_method,
                   l_p_value=qc.l_p_value, lut_values_bitwidth=attr.lut_values_bitwidth)


@dataclass
class NodeWeightsQuantizationConfig:
    """The weight attributes of a node, and settings shared by all of them."""

    attrs: Dict[WeightKey, WeightsAttrQuantizationConfig] = field(default_factory=dict)
    simd_size: Optional[int] = None
    min_threshold: float = MIN_THRESHOLD
    weights_bias_correction: bool = True
    weights_second_moment_correction: bool = False

    @property
    def all_weight_attrs(self) -> List[WeightKey]:
        return list(self.attrs)

    def get_attr_config(self, attr: WeightKey) -> WeightsAttrQuantizationConfig:
        if attr not in self.attrs:
            raise KeyError(f"no weight attribute {attr!r}; this node has {self.all_weight_attrs}")
        return self.attrs[attr]


@dataclass
class NodeQuantizationConfig:
    """One candidate (or the final) quantization of a node."""

    activation_quantization_cfg: ActivationQuantizationConfig
    weights_quantization_cfg: NodeWeightsQuantizationConfig
    op_config: Optional[OpQuantizationConfig] = None  # the TPC option it came from

    def clone(self) -> "NodeQuantizationConfig":
        return copy.deepcopy(self)

    def bit_widths(self) -> tuple:
        """(activation bits or None, {attr: bits}) of the quantized parts, for reports and search."""
        a = self.activation_quantization_cfg
        return (a.activation_n_bits if a.quantized else None,
                {k: c.weights_n_bits for k, c in self.weights_quantization_cfg.attrs.items() if c.enable_weights_quantization})
