"""A quantizer as the exporters see it: what it is (target, method, bits, parameters, channel axis)
and its integer grid, taken from ``core.quant_math`` so the exported integers are the simulated ones.

The framework side writes each quantizer into the exported graph as one marker node carrying its
spec as JSON (:data:`MARKER_OP`); the ONNX lowering turns markers into standard QuantizeLinear /
DequantizeLinear nodes or into the ``mct_quantizers`` custom ops.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

import numpy as np

from hwquant.constants import LUT_VALUES, RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core.numerics import quant_math
from hwquant.tpc.enums import QuantizationMethod

MARKER_DOMAIN = "hwquant_export"
MARKER_OP = "Quantizer"
WEIGHTS, ACTIVATION = "weights", "activation"
# The method's part of mct_quantizers' op and class names ("WeightsLUTPOTQuantizer", "ActivationPOTInferableQuantizer").
MCTQ_KINDS = {QuantizationMethod.POWER_OF_TWO: "POT", QuantizationMethod.SYMMETRIC: "Symmetric",
              QuantizationMethod.UNIFORM: "Uniform", QuantizationMethod.LUT_POT_QUANTIZER: "LUTPOT",
              QuantizationMethod.LUT_SYM_QUANTIZER: "LUTSymmetric"}


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return v.item()
    return v


@dataclass(frozen=True)
class QuantizerSpec:
    target: str                       # WEIGHTS or ACTIVATION
    method: QuantizationMethod
    num_bits: int
    params: Dict[str, Any]            # keys of hwquant.constants (threshold, is_signed, range_min, ...)
    axis: Optional[int] = None        # channel axis of a per-channel quantizer

    def grid(self) -> Union[quant_math.AffineGrid, quant_math.LutGrid]:
        return quant_math.make_grid(self.method, self.num_bits, self.params, axis=self.axis)

    @property
    def is_lut(self) -> bool:
        return self.method in (QuantizationMethod.LUT_POT_QUANTIZER, QuantizationMethod.LUT_SYM_QUANTIZER)

    @property
    def signed(self) -> bool:
        return self.params.get(SIGNED) is not False

    # ---- marker (JSON) form --------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"target": self.target, "method": self.method.name, "num_bits": self.num_bits,
                           "params": {k: _plain(v) for k, v in self.params.items()}, "axis": self.axis},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "QuantizerSpec":
        d = json.loads(text)
        return cls(d["target"], QuantizationMethod[d["method"]], int(d["num_bits"]), d["params"], d["axis"])

    # ---- mct_quantizers custom-op form ---------------------------------------------------
    def mctq_op(self) -> str:
        kind = MCTQ_KINDS[self.method]
        if self.target == ACTIVATION and self.is_lut:
            raise ValueError("lookup-table quantizers exist for weights only")
        return f"{'Weights' if self.target == WEIGHTS else 'Activation'}{kind}Quantizer"

    def mctq_fields(self) -> Dict[str, Any]:
        """The op's parameters as mct_quantizers names them: thresholds / ranges / table (floats or
        per-channel lists) and integer attributes. Ranges are the grid's own (zero exactly on it)."""
        grid = self.grid()
        if self.method == QuantizationMethod.UNIFORM:
            assert isinstance(grid, quant_math.AffineGrid)
            lo, hi = quant_math.grid_range(grid)
            values = {"min_range": _plain(lo), "max_range": _plain(hi)}
        elif self.is_lut:
            assert isinstance(grid, quant_math.LutGrid)
            values = {"lut_values": grid.lut_values.astype(float).tolist(), "threshold": _plain(grid.threshold),
                      "lut_values_bitwidth": grid.lut_values_bitwidth}
        else:  # POT / symmetric: the threshold the grid uses (a power of two for POT)
            assert isinstance(grid, quant_math.AffineGrid)
            values = {"threshold": _plain(np.asarray(grid.scale) * 2.0 ** (self.num_bits - int(self.signed)))}
        values.update(num_bits=self.num_bits, signed=int(self.signed and self.method != QuantizationMethod.UNIFORM))
        return values

    @classmethod
    def from_mctq(cls, op: str, fields: Dict[str, Any]) -> "QuantizerSpec":
        """The spec of an mct_quantizers node (attributes and constant inputs gathered in ``fields``)."""
        target = WEIGHTS if op.startswith("Weights") else ACTIVATION
        kind = op[len("Weights" if target == WEIGHTS else "Activation"):-len("Quantizer")]
        method = {k: m for m, k in MCTQ_KINDS.items()}.get(kind)
        if method is None:
            raise ValueError(f"unknown mct_quantizers op '{op}'")
        axis = int(fields["channel_axis"]) if fields.get("per_channel") else None
        if method == QuantizationMethod.UNIFORM:
            params = {RANGE_MIN: fields["min_range"], RANGE_MAX: fields["max_range"]}
        else:
            params = {THRESHOLD: fields["threshold"], SIGNED: bool(fields.get("signed", 1))}
            if method in (QuantizationMethod.LUT_POT_QUANTIZER, QuantizationMethod.LUT_SYM_QUANTIZER):
                params.update({LUT_VALUES: fields["lut_values"],
                               quant_math.LUT_VALUES_BITWIDTH_KEY: int(fields.get("lut_values_bitwidth", 8))})
        return cls(target, method, int(fields["num_bits"]), params, axis)
