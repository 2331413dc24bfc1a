"""XQuantConfig: MCT 2.6.1's arguments (same names, defaults and meaning), plus hwquant's own, keyword-only:
what the report needs to measure its suggested fixes by quantizing again."""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, Optional

from hwquant.errors import InvalidConfigError

# MCT's metric names: mean squared error, cosine similarity, signal-to-quantization-noise ratio (a ratio, not dB)
MSE, CS, SQNR = "mse", "cs", "sqnr"
DEFAULT_THRESHOLDS = {MSE: 0.1, CS: 0.1, SQNR: 0.1}
DEFAULT_DETECT_UNDER = {MSE: False, CS: True, SQNR: True}


def _number(name: str, value: Any, minimum: float = -math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise InvalidConfigError(f"XQuantConfig.{name} must be a finite number >= {minimum}, got {value!r}")
    return float(value)


class XQuantConfig:
    """Where the report goes and how layers are judged.

    MCT's arguments: ``report_dir`` (created if missing), ``custom_similarity_metrics`` ({name: f(float
    tensor, quantized tensor) -> float}, computed beside mse / cs / sqnr), ``quantize_reported_dir`` (MCT reads
    its quantization logs there; hwquant needs none and keeps it for compatibility),
    ``threshold_quantize_error`` and ``is_detect_under_threshold_quantize_error`` (per metric: a layer is
    degraded when its metric is above, or with True below, the threshold), ``threshold_degrade_layer_ratio``
    (above this fraction of degraded layers the causes are not judged: the thresholds are wrong for the model),
    ``threshold_zscore_outlier_removal``, ``threshold_ratio_unbalanced_concatenation`` and
    ``threshold_bitwidth_mixed_precision_with_model_output_loss_objective`` (the judged causes).

    hwquant's, keyword-only: ``core_config``, ``target_platform_capabilities`` and
    ``target_resource_utilization`` of the run that made the quantized model (default: read from the
    settings the model carries), used to measure fixes by quantizing again; ``measure_fixes`` (how many of
    the most promising fixes are measured; 0: none), ``max_batches`` (of each dataset; None: all),
    ``html`` (write report.html), ``tensorboard`` (write TensorBoard events when tensorboardX is installed),
    ``measure_gptq_epochs`` (when GPTQ is suggested, also measure it with this many epochs; 0: it is not
    measured, as training takes minutes).
    """

    def __init__(self, report_dir: str, custom_similarity_metrics: Optional[Dict[str, Callable]] = None,
                 quantize_reported_dir: Optional[str] = None,
                 threshold_quantize_error: Optional[Dict[str, float]] = None,
                 is_detect_under_threshold_quantize_error: Optional[Dict[str, bool]] = None,
                 threshold_degrade_layer_ratio: float = 0.5, threshold_zscore_outlier_removal: float = 5.0,
                 threshold_ratio_unbalanced_concatenation: float = 16.0,
                 threshold_bitwidth_mixed_precision_with_model_output_loss_objective: int = 2, *,
                 core_config: Any = None, target_platform_capabilities: Any = None,
                 target_resource_utilization: Any = None, measure_fixes: int = 3, max_batches: Optional[int] = None,
                 html: bool = True, tensorboard: bool = True, measure_gptq_epochs: int = 0):
        if not isinstance(report_dir, (str, os.PathLike)) or not str(report_dir):
            raise InvalidConfigError(f"XQuantConfig.report_dir must be a folder path, got {report_dir!r}")
        metrics = dict(custom_similarity_metrics or {})
        for name, fn in metrics.items():
            if not isinstance(name, str) or not callable(fn):
                raise InvalidConfigError(f"XQuantConfig.custom_similarity_metrics maps names to callables "
                                         f"f(float_tensor, quantized_tensor) -> float; got {name!r}: {fn!r}")
        self.report_dir = os.fspath(report_dir)
        self.custom_similarity_metrics = metrics or None
        self.quantize_reported_dir = quantize_reported_dir
        self.threshold_quantize_error = dict(DEFAULT_THRESHOLDS if threshold_quantize_error is None
                                             else threshold_quantize_error)
        for name, value in self.threshold_quantize_error.items():
            _number(f"threshold_quantize_error[{name!r}]", value)
        self.is_detect_under_threshold_quantize_error = dict(DEFAULT_DETECT_UNDER
                                                             if is_detect_under_threshold_quantize_error is None
                                                             else is_detect_under_threshold_quantize_error)
        self.threshold_degrade_layer_ratio = _number("threshold_degrade_layer_ratio", threshold_degrade_layer_ratio, 0)
        self.threshold_zscore_outlier_removal = _number("threshold_zscore_outlier_removal",
                                                        threshold_zscore_outlier_removal, 0)
        self.threshold_ratio_unbalanced_concatenation = _number("threshold_ratio_unbalanced_concatenation",
                                                                threshold_ratio_unbalanced_concatenation, 1)
        bits = threshold_bitwidth_mixed_precision_with_model_output_loss_objective
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
            raise InvalidConfigError("XQuantConfig.threshold_bitwidth_mixed_precision_with_model_output_loss_objective "
                                     f"must be a bit width (an int >= 1), got {bits!r}")
        self.threshold_bitwidth_mixed_precision_with_model_output_loss_objective = bits
        if isinstance(measure_fixes, bool) or not isinstance(measure_fixes, int) or measure_fixes < 0:
            raise InvalidConfigError(f"XQuantConfig.measure_fixes must be an int >= 0, got {measure_fixes!r}")
        if max_batches is not None and (isinstance(max_batches, bool) or not isinstance(max_batches, int)
                                        or max_batches < 1):
            raise InvalidConfigError(f"XQuantConfig.max_batches must be None or an int >= 1, got {max_batches!r}")
        self.core_config = core_config
        self.target_platform_capabilities = target_platform_capabilities
        self.target_resource_utilization = target_resource_utilization
        self.measure_fixes = measure_fixes
        self.max_batches = max_batches
        if isinstance(measure_gptq_epochs, bool) or not isinstance(measure_gptq_epochs, int) or measure_gptq_epochs < 0:
            raise InvalidConfigError(f"XQuantConfig.measure_gptq_epochs must be an int >= 0, got {measure_gptq_epochs!r}")
        self.measure_gptq_epochs = measure_gptq_epochs
        self.html = bool(html)
        self.tensorboard = bool(tensorboard)
