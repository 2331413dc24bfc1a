"""`MCTWrapper`: one call that quantizes a model for the IMX500 converter version it names and exports it.

    flag, quantized = MCTWrapper().quantize_and_export(model, representative_dataset, method="GPTQ",
                                                       use_mixed_precision=True,
                                                       param_items=[["weights_compression_ratio", 0.5]])

The call picks the TPC from `sdsp_version`, builds the core configuration from the parameters, for
mixed precision sets a weights-memory target of `weights_compression_ratio` times the model's
8-bit weights memory, runs PTQ or GPTQ and exports to `save_model_path`: MCTQ ONNX for PyTorch
(`framework='pytorch'`, default './qmodel.onnx'), the quantized Keras model as a `.keras` file for Keras
(`framework='tensorflow'`, any Keras 3 backend, default './qmodel.keras'), as MCT's wrapper does.
Parameters are given as `[[key, value], ...]`; each mode reads its own subset (`PARAMETERS_BY_MODE`).

Other MCT releases spell the call differently; their spellings are accepted: `use_internal_tpc` (True: the
toolkit's own IMX500 TPC, from `sdsp_version` or from the older `target_platform_version` name such as 'v1';
False: the edge-mdt-tpc package's IMX500 TPC of version `tpc_version`, default '5.0', whose contents hwquant
ships, so that package need not be installed), `method` before `framework` given by position, and the LQ-PTQ
parameters `learning_rate` / `converter_ver` (ignored with a warning, as every parameter a mode does not read).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from hwquant import core, exporter, gptq, ptq
from hwquant.constants import IMX500_TPC
from hwquant.errors import InvalidConfigError, InvalidTPCError
from hwquant.tpc import get_target_platform_capabilities, get_target_platform_capabilities_sdsp

log = logging.getLogger(__name__)

# Every parameter and its default (MCT's).
DEFAULT_PARAMETERS: Dict[str, Any] = {
    "sdsp_version": "3.14",
    "activation_error_method": core.QuantizationErrorMethod.MSE,
    "weights_bias_correction": True,
    "z_threshold": float("inf"),
    "linear_collapsing": True,
    "residual_collapsing": True,
    "distance_weighting_method": None,
    "num_of_images": 32,
    "use_hessian_based_scores": False,
    "weights_compression_ratio": 0.75,
    "n_epochs": 5,
    "optimizer": None,
    "save_model_path": "./qmodel.onnx",
    # other MCT releases' TPC parameters: use_internal_tpc=True reads target_platform_version (the TPC's older
    # name, 'v1' or 'v1_lut'; None: from sdsp_version), use_internal_tpc=False reads tpc_version (edge-mdt-tpc's)
    "target_platform_version": None,
    "tpc_version": "5.0",
    # the LQ-PTQ method's (not provided): no mode reads them
    "learning_rate": 0.001,
    "converter_ver": "v3.14",
}
_QUANTIZATION = ("activation_error_method", "weights_bias_correction", "z_threshold", "linear_collapsing",
                 "residual_collapsing")
_MIXED_PRECISION = ("distance_weighting_method", "num_of_images", "use_hessian_based_scores")
_COMMON = ("sdsp_version", *_QUANTIZATION, "save_model_path")  # (with use_internal_tpc=False: tpc_version)
_GPTQ = ("n_epochs", "optimizer")
# (method, use_mixed_precision) -> the parameters that mode reads
PARAMETERS_BY_MODE: Dict[Tuple[str, bool], Tuple[str, ...]] = {
    ("PTQ", False): _COMMON,
    ("PTQ", True): _COMMON + _MIXED_PRECISION + ("weights_compression_ratio",),
    ("GPTQ", False): _COMMON + _GPTQ,
    ("GPTQ", True): _COMMON + _MIXED_PRECISION + ("weights_compression_ratio",) + _GPTQ,
}
FRAMEWORKS = ("pytorch", "tensorflow")
METHODS = ("PTQ", "GPTQ")
# the TPC parameters read with use_internal_tpc True / False (target_platform_version only when given)
_TPC_PARAMETERS = {True: ("sdsp_version", "target_platform_version"), False: ("tpc_version",)}
# save_model_path's default for each framework (MCT's)
DEFAULT_SAVE_PATH = {"pytorch": "./qmodel.onnx", "tensorflow": "./qmodel.keras"}


class _Functions:
    """The facades of one framework, with MCT's names (looked up when a call needs them)."""

    def __init__(self, framework: str):
        prefix = "keras" if framework == "tensorflow" else "pytorch"
        self.resource_utilization_data = getattr(core, f"{prefix}_resource_utilization_data")
        self.post_training_quantization = getattr(ptq, f"{prefix}_post_training_quantization")
        self.get_gptq_config = getattr(gptq, f"get_{prefix}_gptq_config")
        self.gradient_post_training_quantization = getattr(gptq, f"{prefix}_gradient_post_training_quantization")
        self.export_model = getattr(exporter, f"{prefix}_export_model")


class MCTWrapper:
    """MCT's wrapper over quantization (PTQ or GPTQ, with or without mixed precision) and export.

    `params` holds the parameters of the last call's mode, as used.
    """

    def __init__(self) -> None:
        self.params: Dict[str, Any] = dict(DEFAULT_PARAMETERS)

    def quantize_and_export(self, float_model: Any, representative_dataset: Callable[[], Any],
                            framework: str = "pytorch", method: str = "PTQ", use_mixed_precision: bool = False,
                            param_items: Optional[Sequence[Sequence[Any]]] = None,
                            use_internal_tpc: bool = True) -> Tuple[bool, Any]:
        """Quantize `float_model` and export it to the `save_model_path` parameter.

        Args:
            float_model: the float model: a torch.nn.Module for framework 'pytorch', a Keras 3 functional
                or Sequential model for 'tensorflow' (on any Keras backend).
            representative_dataset: zero-argument callable returning a fresh iterator of input batches.
            framework: 'pytorch' or 'tensorflow' (Keras).
            method: 'PTQ' or 'GPTQ'. (Releases of MCT whose order is method, framework: given by position in
                that order, they are read as meant.)
            use_mixed_precision: search kernel bit widths under a weights-memory target of
                `weights_compression_ratio` x the model's weights memory at its base bit widths.
            param_items: `[[key, value], ...]` overriding DEFAULT_PARAMETERS.
            use_internal_tpc: True (default): the toolkit's own IMX500 TPC, that of `sdsp_version` (or of
                `target_platform_version`, MCT's older name such as 'v1'). False: edge-mdt-tpc's IMX500 TPC of
                version `tpc_version` (default '5.0'; hwquant ships those versions' contents).

        Returns:
            (True, the quantized model); errors are raised, nothing is exported then.
        """
        if framework in METHODS and method in FRAMEWORKS:  # another release's order, by position: unambiguous
            framework, method = method, framework
        if not isinstance(use_internal_tpc, bool):
            raise InvalidConfigError(f"use_internal_tpc must be True or False, got {use_internal_tpc!r}")
        mode = _check_mode(framework, method, use_mixed_precision)
        params = _parameters(mode, param_items, framework, use_internal_tpc)
        self.params = params
        _check_model(float_model, framework)
        if framework == "tensorflow" and not str(params["save_model_path"]).endswith(".keras"):
            raise InvalidConfigError(f"save_model_path={params['save_model_path']!r}: framework='tensorflow' exports the "
                                     "quantized Keras model as a '.keras' file; give a path ending in .keras")
        fw = _Functions(framework)
        tpc = _tpc(params, framework, use_internal_tpc)
        quantization = core.QuantizationConfig(**{k: params[k] for k in _QUANTIZATION})
        if use_mixed_precision:
            mixed = core.MixedPrecisionQuantizationConfig(**{k: params[k] for k in _MIXED_PRECISION})
            core_config = core.CoreConfig(quantization_config=quantization, mixed_precision_config=mixed)
            full = fw.resource_utilization_data(float_model, representative_dataset, core_config, tpc)
            target = core.ResourceUtilization(weights_memory=full.weights_memory * params["weights_compression_ratio"])
        else:
            core_config, target = core.CoreConfig(quantization_config=quantization), None
        common = dict(target_resource_utilization=target, core_config=core_config, target_platform_capabilities=tpc)
        if method == "PTQ":
            quantized, _ = fw.post_training_quantization(float_model, representative_dataset, **common)
        else:
            gptq_config = fw.get_gptq_config(n_epochs=params["n_epochs"], optimizer=params["optimizer"])
            quantized, _ = fw.gradient_post_training_quantization(float_model, representative_dataset,
                                                                  gptq_config=gptq_config, **common)
        if framework == "tensorflow":  # (MCT's Keras export: the quantized model as it is, a .keras file)
            fw.export_model(quantized, params["save_model_path"])
        else:
            fw.export_model(quantized, params["save_model_path"], representative_dataset)
        return True, quantized


def _tpc(params: Dict[str, Any], framework: str, use_internal_tpc: bool) -> Any:
    """The TPC the parameters name: the toolkit's own (an SDSP converter version, or MCT's older TPC version
    name), or with use_internal_tpc=False edge-mdt-tpc's IMX500 version, which hwquant ships."""
    if not use_internal_tpc:
        version = params["tpc_version"]
        try:
            return get_target_platform_capabilities(version, IMX500_TPC)
        except InvalidTPCError as e:
            raise InvalidTPCError(f"tpc_version={version!r} (use_internal_tpc=False: edge-mdt-tpc's IMX500 TPC "
                                  f"versions, whose contents hwquant ships): {e}") from e
    if params.get("target_platform_version") is not None:
        return get_target_platform_capabilities(framework, IMX500_TPC, params["target_platform_version"])
    return get_target_platform_capabilities_sdsp(params["sdsp_version"])


def _check_mode(framework: str, method: str, use_mixed_precision: bool) -> Tuple[str, bool]:
    if method not in METHODS:
        hint = " (LQ-PTQ is a TensorFlow-only method of MCT's and is not provided)" if method == "LQPTQ" else ""
        raise InvalidConfigError(f"method={method!r} is not supported{hint}: use 'PTQ' or 'GPTQ'")
    if framework not in FRAMEWORKS:
        raise InvalidConfigError(f"framework={framework!r} is not supported: use one of {', '.join(FRAMEWORKS)}")
    if not isinstance(use_mixed_precision, bool):
        raise InvalidConfigError(f"use_mixed_precision must be True or False, got {use_mixed_precision!r}")
    return method, use_mixed_precision


def _check_model(model: Any, framework: str) -> None:
    # 'tensorflow' for a Keras model, 'pytorch' for another torch.nn.Module (by class, no framework import;
    # a Keras model on the torch backend is a torch.nn.Module too)
    roots = {c.__module__.split(".")[0] for c in type(model).__mro__}
    kind = "tensorflow" if roots & {"keras", "tf_keras", "tensorflow"} else "pytorch" if "torch" in roots else None
    if kind is not None and kind != framework:
        what = "a torch.nn.Module" if kind == "pytorch" else "a Keras model"
        raise InvalidConfigError(f"framework={framework!r} but float_model is {what} ({type(model).__name__}): pass "
                                 f"framework={kind!r}")


def _parameters(mode: Tuple[str, bool], param_items: Optional[Sequence[Sequence[Any]]],
                framework: str = "pytorch", use_internal_tpc: bool = True) -> Dict[str, Any]:
    """The mode's parameters: defaults (save_model_path: the framework's; the TPC's: those `use_internal_tpc`
    reads), overridden by `param_items`. A key no mode knows is an error (a typo would otherwise be dropped
    silently); a key another mode reads is ignored with a warning."""
    tpc_keys = _TPC_PARAMETERS[use_internal_tpc]
    wanted = tuple(k for k in PARAMETERS_BY_MODE[mode] if k != "sdsp_version") + tpc_keys
    params = {k: DEFAULT_PARAMETERS[k] for k in wanted if k != "target_platform_version"}
    params["save_model_path"] = DEFAULT_SAVE_PATH[framework]
    given = {item[0] for item in param_items or () if isinstance(item, Sequence) and not isinstance(item, (str, bytes))
             and len(item) == 2}
    if {"sdsp_version", "target_platform_version"} <= given and use_internal_tpc:
        raise InvalidConfigError("param_items gives both sdsp_version and target_platform_version: both choose the "
                                 "TPC; give one (sdsp_version: the IMX500 converter version, e.g. '3.16')")
    for item in param_items or ():
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 2:
            raise InvalidConfigError(f"param_items holds {item!r}; each item must be a [key, value] pair")
        key, value = item
        if key not in DEFAULT_PARAMETERS:
            raise InvalidConfigError(f"param_items: unknown parameter {key!r}; known: {', '.join(DEFAULT_PARAMETERS)}")
        if key in _TPC_PARAMETERS[not use_internal_tpc]:
            log.warning("param_items: %r is not used with use_internal_tpc=%s (which reads %s); ignored", key,
                        use_internal_tpc, " / ".join(tpc_keys))
            continue
        if key not in wanted:
            log.warning("param_items: %r is not used by method=%r with use_mixed_precision=%s; ignored",
                        key, mode[0], mode[1])
            continue
        params[key] = value
    ratio = params.get("weights_compression_ratio")
    if ratio is not None and not (isinstance(ratio, (int, float)) and 0 < ratio <= 1):
        raise InvalidConfigError(f"weights_compression_ratio={ratio!r}: give a fraction in (0, 1] of the "
                                 "model's weights memory")
    return params
