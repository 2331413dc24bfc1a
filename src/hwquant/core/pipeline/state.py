"""What the pipeline's stages hand to each other, and what a run reports (a leaf module: the pipeline,
the facades, the selection of mixed precision and the troubleshooting report import it; it imports none
of them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hwquant.core.configuration.config import CoreConfig, ResourceUtilization
from hwquant.core.graph.framework_adapter import FrameworkAdapter
from hwquant.core.graph.model_graph import Graph
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.tpc.schema import TargetPlatformCapabilities


@dataclass
class MixedPrecisionResult:
    """The candidate chosen per configurable node, its bit widths, and the resource figures reached."""
    choice: List[int]
    bit_widths: Dict[str, Any]
    figures: Dict[str, float]


@dataclass
class PipelineReport:
    """What a quantization run did, stage by stage: the facades build UserInformation from it and the
    troubleshooting report reads it. Counts are of layers (or tensors) changed; None: the stage did not run."""
    calibration_batches: int = 0
    folded_batch_norms: int = 0
    relu_bound: Optional[int] = None
    linear_collapsed: Optional[int] = None
    residual_collapsed: Optional[int] = None
    equalized: Optional[int] = None
    # inputs of layers that run in float, kept float (a quantizer there would only add error)
    float_layer_inputs: List[str] = field(default_factory=list)
    kept_float_masks: List[str] = field(default_factory=list)   # masking sentinels (-inf, float32 min)
    mixed_precision: Optional[MixedPrecisionResult] = None
    input_scale: Dict[str, float] = field(default_factory=dict)  # per input: the factor the data is multiplied by
    shift_negative: Optional[int] = None
    bias_corrected: int = 0
    bias_correction_error: Optional[Dict[str, float]] = None     # relative output error "without" / "with" it
    float_layers: Dict[str, str] = field(default_factory=dict)  # layer -> why it stays float
    unmatched_bit_widths: List[str] = field(default_factory=list)  # BitWidthConfig selections that matched no node

    def thresholds(self, graph: Graph) -> Dict[str, Dict[str, Any]]:
        """Per node, the final activation and weight quantization parameters ({} where not quantized)."""
        out: Dict[str, Dict[str, Any]] = {}
        for node in graph:
            cfg = node.final_config
            if cfg is None:
                continue
            entry: Dict[str, Any] = {}
            if cfg.activation_quantization_cfg.quantized:
                entry["activation"] = dict(cfg.activation_quantization_cfg.activation_quantization_params)
            weights = {attr: dict(w.weights_quantization_params)
                       for attr, w in cfg.weights_quantization_cfg.attrs.items() if w.enable_weights_quantization}
            if weights:
                entry["weights"] = weights
            if entry:
                out[node.name] = entry
        return out


@dataclass
class PipelineState:
    """What the stages hand to each other."""

    graph: Graph
    core_config: CoreConfig
    adapter: FrameworkAdapter
    tpc: TargetPlatformCapabilities
    fqc: Any = None
    fused_groups: List[List[str]] = field(default_factory=list)
    statistics: Dict[str, TensorStatistics] = field(default_factory=dict)
    report: PipelineReport = field(default_factory=PipelineReport)
    target: Optional[ResourceUtilization] = None  # mixed precision when any figure is restricted
    # GPTQ's float teacher: a copy of the graph taken before bias correction (which changes biases
    # for the quantized model only); None unless run_ptq is asked to keep it
    float_graph: Optional[Graph] = None
    # the fake-quantized model bias_correction_where_it_helps built for the graph it left (None when it
    # built none): a facade whose fake-quantized model is its result returns it instead of a rebuild
    judged_model: Any = None
