"""mct.xquant, tested once and run on every back end present (tests/backend_kit.py): MCT's dictionaries and
files, the troubleshooting judgement, fixes that are measured, and bad input refused before anything is
written."""
import json
import math
import os

import numpy as np
import pytest

import hwquant as mct
from hwquant.errors import InvalidConfigError
from hwquant.xquant.analysis import XQuantInputError

SPECS = [("conv", 8, 3, False), ("bn",), ("relu",), ("conv", 16, 3), ("relu",), ("conv", 8, 1)]
IN_SHAPE = (3, 12, 12)
MCT_KEYS = {"output_similarity_metrics_repr", "output_similarity_metrics_val", "intermediate_similarity_metrics_repr",
            "intermediate_similarity_metrics_val"}


def _report(kit, float_model, quantized, batches, config, troubleshoot=True, val=None):
    prefix = kit.facade_prefix
    name = f"xquant_report_troubleshoot_{prefix}_experimental" if troubleshoot else f"xquant_report_{prefix}_experimental"
    val = val if val is not None else [(b[0], np.zeros(len(b[0]))) for b in batches]
    return getattr(mct.xquant, name)(float_model, quantized, kit.data_gen(batches), lambda: iter(val), config)


@pytest.fixture
def quantized(kit):
    model = kit.model(IN_SHAPE, SPECS)
    batches = kit.batches(IN_SHAPE, n=3, batch=8, seed=3)
    q, _ = kit.ptq(model, batches)
    return model, q, batches


def test_mct_dictionaries_match_the_models(kit, quantized, tmp_path):
    model, q, batches = quantized
    result = _report(kit, model, q, batches, mct.xquant.XQuantConfig(tmp_path, measure_fixes=0), troubleshoot=False)
    assert set(result) == MCT_KEYS
    # the output figures are MCT's: per batch, averaged over the batches
    ratios = []
    for (x,) in batches:
        f, y = kit.run(model, x).astype(np.float64), kit.run(q, x).astype(np.float64)
        ratios.append(np.mean(f ** 2) / np.mean((f - y) ** 2))
    assert result["output_similarity_metrics_repr"]["sqnr"] == pytest.approx(np.mean(ratios), rel=1e-4)
    assert set(result["output_similarity_metrics_repr"]) == {"mse", "cs", "sqnr"}
    layers = result["intermediate_similarity_metrics_repr"]
    assert len(layers) >= 4 and list(layers) == list(result["intermediate_similarity_metrics_val"])
    for values in layers.values():
        assert 0.99 < values["cs"] <= 1.0 + 1e-9 and values["sqnr"] > 100 and values["mse"] >= 0
    with open(tmp_path / "quant_report.json") as f:
        assert json.load(f) == json.loads(json.dumps(result))
    assert (tmp_path / "report.html").is_file() and (tmp_path / "report.json").is_file()
    assert not any(p.name.startswith(".hwquant") for p in tmp_path.iterdir())  # no staging folder left


def test_the_report_finds_the_layer_that_costs_most_and_measures_its_fix(kit, quantized, tmp_path):
    model, _, batches = quantized
    # one convolution's kernel at 2 bits: the layer that costs most, and more bits the remedy
    bit_width = mct.core.BitWidthConfig()
    name = [layer.name for layer in model.layers if "conv" in layer.name][1] if kit.name == "keras" else "_3"
    bit_width.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter(name), 2,
                                           mct.target_platform_capabilities.constants.KERNEL_ATTR)
    q, _ = kit.ptq(model, batches, core_config=mct.core.CoreConfig(bit_width_config=bit_width))
    config = mct.xquant.XQuantConfig(tmp_path, threshold_quantize_error={"sqnr": 1000.0},
                                     is_detect_under_threshold_quantize_error={"sqnr": True}, measure_fixes=2)
    similarity, causes = _report(kit, model, q, batches, config)
    report = similarity.report
    row = next(r for r in report["layers"] if r["name"] == name)
    assert row["rank"] == 1 and row["weights"][next(iter(row["weights"]))]["n_bits"] == 2
    assert name in report["degraded"]
    best = report["fixes"][0]
    assert best["layer"] == name and best["kind"] == "weights_bits" and best["measured"]["gain_db"] > 3
    # the fix's code is real: pasted, it gives the gain it says
    namespace = {"mct": mct}
    exec(best["code"], namespace)
    fixed, _ = kit.ptq(model, batches, core_config=namespace["core_config"])
    f = np.concatenate([kit.run(model, b[0]) for b in batches]).astype(np.float64)
    y = np.concatenate([kit.run(fixed, b[0]) for b in batches]).astype(np.float64)
    assert 10 * math.log10(np.mean(f ** 2) / np.mean((f - y) ** 2)) == pytest.approx(best["measured"]["sqnr_db"], abs=0.05)
    assert isinstance(causes, dict) and (tmp_path / "troubleshoot_report.json").is_file()
    assert (tmp_path / "quant_loss_sqnr_repr.png").is_file()


def test_outliers_are_judged_and_z_threshold_suggested(kit, tmp_path):
    model = kit.model(IN_SHAPE, SPECS)
    batches = kit.batches(IN_SHAPE, n=3, batch=8, seed=3)
    for b in batches:  # a few huge input values: the input's range is spent on them
        b[0][0, 0, 0, 0] = 80.0
    q, _ = kit.ptq(model, batches)
    config = mct.xquant.XQuantConfig(tmp_path, threshold_quantize_error={"cs": 0.99999},
                                     is_detect_under_threshold_quantize_error={"cs": True}, measure_fixes=1,
                                     threshold_degrade_layer_ratio=1.01)
    _, causes = _report(kit, model, q, batches, config)
    outliers = [name for name, _ in causes.get("outlier_removal", [])]
    assert outliers, causes
    assert all((tmp_path / "outlier_histgrams" / f"{n}.png").is_file() for n in outliers)
    report = json.loads((tmp_path / "report.json").read_text())
    assert any(f["kind"] == "z_threshold" for f in report["fixes"])


def test_custom_metrics_get_the_frameworks_tensors(kit, quantized, tmp_path):
    model, q, batches = quantized
    seen = []

    def max_abs(x, y):
        seen.append(type(x).__name__)
        return float(abs(x - y).max())
    result = _report(kit, model, q, batches, mct.xquant.XQuantConfig(tmp_path, {"max_abs": max_abs}, measure_fixes=0),
                     troubleshoot=False)
    assert all("max_abs" in v for v in result["intermediate_similarity_metrics_val"].values())
    assert set(seen) == {"Tensor" if kit.name == "torch" else "ndarray"}


def test_bad_input_is_refused_before_anything_is_written(kit, quantized, tmp_path):
    model, q, batches = quantized
    other = kit.model(IN_SHAPE, [("conv", 4, 3), ("relu",)])
    config = mct.xquant.XQuantConfig(tmp_path / "r", measure_fixes=0)
    with pytest.raises(XQuantInputError, match="do not match"):
        _report(kit, other, q, batches, config)
    with pytest.raises(XQuantInputError, match="yielded no batch"):
        _report(kit, model, q, batches, config, val=[])
    with pytest.raises(XQuantInputError, match=r"\(inputs, labels\)"):
        _report(kit, model, q, batches, config, val=[b[0] for b in batches])
    assert not os.listdir(tmp_path / "r")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(XQuantInputError, match="cannot be created|not a writable folder"):
        _report(kit, model, q, batches, mct.xquant.XQuantConfig(blocker / "r"))


def test_a_failed_write_leaves_the_folder_as_it_was(kit, quantized, tmp_path, monkeypatch):
    model, q, batches = quantized
    (tmp_path / "report.html").write_text("earlier report")
    import hwquant.xquant.render as render

    def broken(report):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(render, "render_html", broken)
    with pytest.raises(OSError, match="No space left"):
        _report(kit, model, q, batches, mct.xquant.XQuantConfig(tmp_path, measure_fixes=0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    assert (tmp_path / "report.html").read_text() == "earlier report"


def test_config_checks_its_values():
    with pytest.raises(InvalidConfigError, match="report_dir"):
        mct.xquant.XQuantConfig("")
    with pytest.raises(InvalidConfigError, match="custom_similarity_metrics"):
        mct.xquant.XQuantConfig("r", {"m": 3})
    with pytest.raises(InvalidConfigError, match="threshold_zscore_outlier_removal"):
        mct.xquant.XQuantConfig("r", threshold_zscore_outlier_removal=float("nan"))
    with pytest.raises(InvalidConfigError, match="bit width"):
        mct.xquant.XQuantConfig("r", threshold_bitwidth_mixed_precision_with_model_output_loss_objective=0)
    c = mct.xquant.XQuantConfig("r")  # MCT's defaults
    assert c.threshold_quantize_error == {"mse": 0.1, "cs": 0.1, "sqnr": 0.1}
    assert c.is_detect_under_threshold_quantize_error == {"mse": False, "cs": True, "sqnr": True}
    assert (c.threshold_degrade_layer_ratio, c.threshold_zscore_outlier_removal,
            c.threshold_ratio_unbalanced_concatenation,
            c.threshold_bitwidth_mixed_precision_with_model_output_loss_objective) == (0.5, 5.0, 16.0, 2)


def test_mixed_precision_runs_are_measured_at_their_own_bit_widths(kit, quantized, tmp_path):
    model, _, batches = quantized
    full = kit.resource_utilization_data(model, batches)
    target = mct.core.ResourceUtilization(weights_memory=full.weights_memory * 0.6)
    q, info = kit.ptq(model, batches, target_resource_utilization=target)
    # what the run was is read back from the model: its settings and its target
    from hwquant.core.pipeline.model_metadata import settings_of
    metadata = q.hwquant_metadata
    qc, tpc, read_target, notes = settings_of(metadata)
    assert read_target.weights_memory == pytest.approx(target.weights_memory) and notes == []
    similarity = _report(kit, model, q, batches, mct.xquant.XQuantConfig(tmp_path, measure_fixes=1),
                         troubleshoot=False)
    report = similarity.report
    assert any(n.startswith("mixed precision chose W") for r in report["layers"] for n in r["pipeline"])
    assert any("pinned" in n for n in report["settings"]["notes"])
    # the reproduced baseline is the model itself, quantized again at its own bit widths
    assert report["baseline"]["sqnr_db"] == pytest.approx(report["output"]["repr"]["sqnr_db"], abs=0.5)


def test_wider_activations_where_the_tpc_offers_them(kit, tmp_path):
    model = kit.model(IN_SHAPE, SPECS)
    batches = kit.batches(IN_SHAPE, n=2, batch=8, seed=3)
    tpc = mct.get_target_platform_capabilities("4.0")  # 16-bit activations for some operator sets
    q, _ = kit.ptq(model, batches, target_platform_capabilities=tpc)
    result = _report(kit, model, q, batches, mct.xquant.XQuantConfig(tmp_path, measure_fixes=1), troubleshoot=False)
    fixes = {f["kind"]: f for f in result.report["fixes"]}
    assert "activations_16bit" in fixes and fixes["activations_16bit"]["measured"] is not None
    namespace = {"mct": mct}
    exec(fixes["activations_16bit"]["code"], namespace)
    selections = namespace["core_config"].bit_width_config.manual_activation_bit_width_selection_list
    assert selections and all(s.bit_width == 16 for s in selections)
    assert any(f["kind"] == "activation_bits" for f in result.report["fixes"])  # one layer at a time, too


def test_spread_kernel_error_gets_more_bits_on_the_worst_kernels(kit, tmp_path):
    specs = [("conv", 8, 3), ("relu",), ("conv", 8, 3), ("relu",), ("conv", 8, 3), ("relu",), ("conv", 8, 3)]
    model = kit.model(IN_SHAPE, specs)
    batches = kit.batches(IN_SHAPE, n=2, batch=8, seed=3)
    bit_width = mct.core.BitWidthConfig()
    kernels = [layer.name for layer in model.layers if "conv" in layer.name] if kit.name == "keras" else \
        [name for name, m in model.named_modules() if type(m).__name__ == "Conv2d"]
    names = kernels if kit.name == "keras" else [f"_{n}" for n in kernels]
    bit_width.set_manual_weights_bit_width([mct.core.network_editor.NodeNameFilter(n) for n in names], 2,
                                           mct.target_platform_capabilities.constants.KERNEL_ATTR)
    q, _ = kit.ptq(model, batches, core_config=mct.core.CoreConfig(bit_width_config=bit_width))
    config = mct.xquant.XQuantConfig(tmp_path, measure_fixes=2, measure_gptq_epochs=1)
    result = _report(kit, model, q, batches, config, troubleshoot=False)
    fixes = {f["kind"]: f for f in result.report["fixes"]}
    fix = fixes["weights_bits_many"]
    assert fix["measured"]["gain_db"] > 1 and "KiB more weights memory" in fix["why"], fix
    assert fixes["gptq"]["measured"] is not None and "n_epochs=1" in fixes["gptq"]["code"]  # GPTQ, asked for


def test_mcts_module_paths_resolve():
    import importlib

    from hwquant import mct_alias
    assert importlib.import_module("hwquant.xquant.common.xquant_config").XQuantConfig is mct.xquant.XQuantConfig
    for framework, names in (("pytorch", ["xquant_report_pytorch_experimental",
                                          "xquant_report_troubleshoot_pytorch_experimental"]),
                             ("keras", ["xquant_report_keras_experimental",
                                        "xquant_report_troubleshoot_keras_experimental"])):
        facade = importlib.import_module(f"hwquant.xquant.{framework}.facade_xquant_report")
        assert set(names) <= set(dir(facade))
    was = mct_alias.is_enabled()
    mct_alias.enable()
    try:  # MCT's documented path, as user code imports it
        module = importlib.import_module("model_compression_toolkit.xquant.common.xquant_config")
        assert module.XQuantConfig is mct.xquant.XQuantConfig
    finally:
        if not was:
            mct_alias.disable()


def test_negative_activations_are_named_for_shift_negative_correction(kit, tmp_path):
    # MCT's judge lists every PReLU / ELU / Hardswish / SiLU / GELU layer
    model = kit.model(IN_SHAPE, [("conv", 8, 3), ("hswish",), ("conv", 8, 3), ("silu",), ("conv", 4, 1)])
    batches = kit.batches(IN_SHAPE, n=2, batch=8, seed=3)
    q, _ = kit.ptq(model, batches)
    similarity, causes = _report(kit, model, q, batches, mct.xquant.XQuantConfig(tmp_path, measure_fixes=0))
    types = {r["name"]: r["opset"] for r in similarity.report["layers"]}
    assert sorted(types[n] for n in causes["shift_negative_activation"]) == ["HardSwish", "Swish"]
