"""Small constructors shared by the shipped platform definitions."""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

from hwquant.tpc.enums import QuantizationMethod, Signedness
from hwquant.tpc.schema import (AttributeQuantizationConfig, Fusing, OperatorSetGroup, OperatorsSet,
                                OpQuantizationConfig, QuantizationConfigOptions)


def attr(method: QuantizationMethod, n_bits: int, per_channel: bool, enabled: bool) -> AttributeQuantizationConfig:
    return AttributeQuantizationConfig(weights_quantization_method=method, weights_n_bits=n_bits,
                                       weights_per_channel_threshold=per_channel,
                                       enable_weights_quantization=enabled)


def op(default_weight: AttributeQuantizationConfig, activation: QuantizationMethod = QuantizationMethod.POWER_OF_TWO,
       n_bits: int = 8, enabled: bool = True, inputs: Tuple[int, ...] = (8,), signedness: Signedness = Signedness.AUTO,
       simd: Optional[int] = 32, attrs: Optional[Dict[str, AttributeQuantizationConfig]] = None,
       preserving: bool = False) -> OpQuantizationConfig:
    return OpQuantizationConfig(default_weight_attr_config=default_weight, attr_weights_configs_mapping=attrs or {},
                                activation_quantization_method=activation, activation_n_bits=n_bits,
                                supported_input_activation_n_bits=inputs, enable_activation_quantization=enabled,
                                quantization_preserving=preserving, signedness=signedness, simd_size=simd)


def options(configs: Sequence[OpQuantizationConfig], base: Optional[OpQuantizationConfig] = None) -> QuantizationConfigOptions:
    return QuantizationConfigOptions(quantization_configurations=tuple(configs), base_config=base)


def sets(names: Sequence[str], qco: Optional[QuantizationConfigOptions]) -> list:
    return [OperatorsSet(name=n, qc_options=qco) for n in names]


def fusing(*positions: Sequence[str], by_name: Dict[str, OperatorsSet]) -> Fusing:
    """A fusing pattern given, per position, the operator-set names that may stand there."""
    groups = [by_name[names[0]] if len(names) == 1 else OperatorSetGroup(operators_set=[by_name[n] for n in names])
              for names in positions]
    return Fusing(operator_groups=tuple(groups))
