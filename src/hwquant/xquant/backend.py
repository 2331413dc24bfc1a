"""What the troubleshooting report needs from a framework: its contract, and the plain facts it gets.

The report (``report.py``) is written once; each framework gives it a back end (hwquant.torch.xquant,
hwquant.keras.xquant) that runs models and reads quantizers, nothing more."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence

import numpy as np

from hwquant.core.numerics import quant_math
from hwquant.core.graph.model_graph import Graph


@dataclass
class QuantizerFacts:
    """One quantizer of the quantized model: its method, bit width and parameters (hwquant.constants keys),
    per-channel along ``channel_axis`` (the framework's layout) or per tensor."""
    method: Any
    n_bits: int
    params: Dict[str, Any]
    channel_axis: Optional[int] = None

    @classmethod
    def of(cls, quantizer: Any) -> Optional["QuantizerFacts"]:
        """An inferable quantizer's facts (either framework's: both carry ``method``, ``num_bits``, ``params``,
        ``channel_axis``); None for anything else (a trainable quantizer before finalize)."""
        if not all(hasattr(quantizer, a) for a in ("method", "num_bits", "params")):
            return None
        return cls(quantizer.method, quantizer.num_bits, dict(quantizer.params), getattr(quantizer, "channel_axis", None))

    def grid(self) -> Any:
        return quant_math.make_grid(self.method, self.n_bits, self.params, axis=self.channel_axis)

    def value_range(self) -> Optional[tuple]:
        """(lowest, highest) representable values (per-tensor quantizers; None for a lookup table or per
        channel): what a histogram of the float tensor is drawn against."""
        return per_tensor_range(self.grid())

    def describe(self) -> str:
        name = getattr(self.method, "name", str(self.method))
        return f"{name} {self.n_bits}-bit" + (" per-channel" if self.channel_axis is not None else "")


def per_tensor_range(grid: Any) -> Optional[tuple]:
    """quant_math.grid_range of a per-tensor affine grid; None for a per-channel or lookup-table one."""
    if not isinstance(grid, quant_math.AffineGrid) or grid.axis is not None:
        return None
    return quant_math.grid_range(grid)


@dataclass
class LayerFacts:
    """A layer of the quantized model that quantizes something, under its graph node's name."""
    name: str
    layer_type: str
    activation: Optional[QuantizerFacts] = None
    weights: Dict[str, QuantizerFacts] = field(default_factory=dict)
    bias: Optional[np.ndarray] = None     # the bias the quantized layer adds (after any bias correction)


@dataclass
class BatchRun:
    """One batch through both models: the float model's outputs, the quantized model's outputs (each a
    flat list of arrays), and the tensors at the requested nodes in the float reference (the float model
    prepared as it was for quantization: batch norms folded, layers collapsed) and in the quantized model."""
    float_outputs: List[np.ndarray]
    quantized_outputs: List[np.ndarray]
    float_tensors: Dict[str, np.ndarray]
    quantized_tensors: Dict[str, np.ndarray]


class XQuantBackend(Protocol):
    framework: str                       # "pytorch" / "keras"
    reference: Graph                     # the float reference graph, with the TPC's candidates per node
    adapter: Any                         # the framework adapter of the reference (resource figures read it)

    def batches(self, dataset: Callable[[], Any], validation: bool) -> Iterator[List[Any]]:
        """The model inputs of each batch (a validation dataset yields (inputs, labels): labels dropped)."""

    def layers(self) -> List[LayerFacts]:
        """The quantized model's layers that quantize something."""

    def run(self, batch: List[Any], names: Sequence[str]) -> BatchRun:
        """One batch through the float model, the reference and the quantized model."""

    def output_sensitivity(self, batch: List[Any], names: Sequence[str], probes: np.ndarray) -> Dict[str, float]:
        """Per node, E|J^T v|^2 per sample: J the reference's outputs' Jacobian with respect to the node's tensor,
        v the given random probes (one per output element, ``probes[k]`` for pass k, the outputs flattened and
        concatenated). Noise of variance s^2 at the node adds s^2 times this to the output's squared error."""

    def native(self, array: np.ndarray) -> Any:
        """The framework's own tensor of an array (custom similarity metrics receive those)."""

    def quantize(self, core_config: Any, tpc: Any, target: Any) -> Any:
        """The float model quantized again with these settings (a fix measured)."""

    def quantize_gptq(self, core_config: Any, tpc: Any, n_epochs: int) -> Any:
        """The float model quantized again with GPTQ (its default configuration, ``n_epochs`` epochs)."""

    def outputs(self, model: Any, batch: List[Any]) -> List[np.ndarray]:
        """A model's outputs on one batch, a flat list of arrays."""
