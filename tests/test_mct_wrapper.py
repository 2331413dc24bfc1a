"""MCT's one-call wrapper: quantize for an IMX500 converter version and export, in each mode."""
import logging

import numpy as np
import pytest
import torch
from small_nets import seeded_net

import hwquant as mct


def _data():
    torch.manual_seed(1)
    batches = [torch.randn(8, 3, 16, 16) for _ in range(2)]
    return lambda: iter([[b] for b in batches])


def _run(tmp_path, **kwargs):
    params = [["save_model_path", str(tmp_path / "q.onnx")]] + kwargs.pop("param_items", [])
    return mct.wrapper.MCTWrapper().quantize_and_export(seeded_net(), _data(), param_items=params, **kwargs)


def _kernel_bits(q):
    return {n: w.weights_quantizers["weight"].num_bits for n, w in q.named_modules() if hasattr(w, "weights_quantizers")}


def _session(path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime_extensions")
    import mct_quantizers
    return ort.InferenceSession(str(path), mct_quantizers.get_ort_session_options(), providers=["CPUExecutionProvider"])


def test_ptq_quantizes_for_the_converter_version_and_exports(tmp_path):
    from mct_quantizers import PytorchQuantizationWrapper

    from hwquant.torch.deployment.metadata import read_metadata
    ok, q = _run(tmp_path, param_items=[["sdsp_version", "3.16"]])
    assert ok and any(isinstance(m, PytorchQuantizationWrapper) for m in q.modules())
    assert read_metadata(q)["tpc_minor_version"] == "4"  # converter 3.16 runs IMX500 TPC 4.0
    x = next(_data()())[0]
    sess = _session(tmp_path / "q.onnx")
    out = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    # mct-quantizers' custom ops round a tie now and then the other way: at most one output step apart
    diff = np.abs(out - q(x).detach().numpy())
    assert diff.max() <= 1 / 32 + 1e-6 and (diff > 1e-4).mean() < 0.05
    assert set(_kernel_bits(q).values()) == {8}


def test_mixed_precision_meets_the_compression_ratio(tmp_path):
    data = _data()
    tpc = mct.get_target_platform_capabilities_sdsp("3.14")
    full = mct.core.pytorch_resource_utilization_data(seeded_net(), data, target_platform_capabilities=tpc)
    w = mct.wrapper.MCTWrapper()
    ok, q = w.quantize_and_export(seeded_net(), data, use_mixed_precision=True,
                                  param_items=[["weights_compression_ratio", 0.5], ["num_of_images", 16],
                                               ["save_model_path", str(tmp_path / "q.onnx")]])
    bits = _kernel_bits(q)
    sizes = {n: m.float_weight("weight").numel() for n, m in q.named_modules() if hasattr(m, "weights_quantizers")}
    assert sum(sizes[n] * bits[n] / 8 for n in bits) <= 0.5 * full.weights_memory
    assert min(bits.values()) < 8 and (tmp_path / "q.onnx").is_file()
    assert w.params["num_of_images"] == 16 and "n_epochs" not in w.params  # the mode's parameters, as used


def test_gptq_trains_the_rounding(tmp_path):
    ok, q = _run(tmp_path, method="GPTQ", param_items=[["n_epochs", 1]])
    _, ptq = _run(tmp_path / "..", param_items=[])
    gptq_k, ptq_k = (dict(m.named_modules())["c2"].get_quantized_weights()["weight"] for m in (q, ptq))
    assert not torch.equal(gptq_k, ptq_k)  # the rounding moved
    assert (tmp_path / "q.onnx").is_file()


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="QAT"), "method='QAT' is not supported"),
    (dict(method="LQPTQ"), "TensorFlow-only"),
    (dict(framework="jax"), "framework='jax'"),
    (dict(framework="tensorflow"), "float_model is a torch.nn.Module"),
    (dict(param_items=[["z_treshold", 8]]), "unknown parameter 'z_treshold'"),
    (dict(param_items=[["z_threshold"]]), "\\[key, value\\] pair"),
    (dict(use_mixed_precision=True, param_items=[["weights_compression_ratio", 1.5]]), "fraction in \\(0, 1\\]"),
    (dict(param_items=[["sdsp_version", "3.15"]]), "SDSP.*'3.15'"),
])
def test_bad_arguments_are_refused_and_nothing_is_written(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):  # InvalidConfigError, or InvalidTPCError for the version
        _run(tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_a_parameter_of_another_mode_is_ignored_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        ok, _ = _run(tmp_path, param_items=[["n_epochs", 3]])
    assert ok and "'n_epochs' is not used by method='PTQ'" in caplog.text


def test_other_releases_spellings_use_internal_tpc_and_method_first(tmp_path):
    """MCT releases whose call is quantize_and_export(model, data, method, framework, use_internal_tpc=...,
    ...) with edge-mdt-tpc's `tpc_version`: read as meant (the edge-mdt-tpc IMX500 versions ship with hwquant)."""
    from hwquant.torch.deployment.metadata import read_metadata
    params = [["tpc_version", "4.0"], ["save_model_path", str(tmp_path / "q.onnx")]]
    ok, q = mct.wrapper.MCTWrapper().quantize_and_export(seeded_net(), _data(), "PTQ", "pytorch",
                                                         use_internal_tpc=False, param_items=params)
    assert ok and read_metadata(q)["tpc_minor_version"] == "4" and (tmp_path / "q.onnx").is_file()


def test_the_tpc_each_spelling_chooses(caplog):
    from hwquant.wrapper.mct_wrapper import _parameters, _tpc

    def tpc(items=(), internal=True, framework="pytorch"):
        return _tpc(_parameters(("PTQ", False), [list(i) for i in items], framework, internal), framework, internal)
    get = mct.get_target_platform_capabilities
    assert tpc() == mct.get_target_platform_capabilities_sdsp("3.14") == get("1.0")
    assert tpc([("sdsp_version", "3.17")]) == get("5.0")
    assert tpc([("target_platform_version", "v1_lut")]) == get("1.0_lut")  # MCT's older name of the version
    assert tpc([("target_platform_version", "v1")], framework="tensorflow") == get("1.0")
    assert tpc(internal=False) == get("5.0")  # edge-mdt-tpc's default version, as MCT's wrapper
    assert tpc([("tpc_version", "4.1")], internal=False) == get("4.1")
    with caplog.at_level(logging.WARNING):
        assert tpc([("tpc_version", "4.0")]) == get("1.0")
        assert tpc([("sdsp_version", "3.16")], internal=False) == get("5.0")
        assert _parameters(("GPTQ", True), [["learning_rate", 0.01], ["converter_ver", "v3.16"]])
    assert "'tpc_version' is not used with use_internal_tpc=True" in caplog.text
    assert "'sdsp_version' is not used with use_internal_tpc=False" in caplog.text
    assert "'learning_rate' is not used by method='GPTQ'" in caplog.text
    assert "'converter_ver' is not used" in caplog.text


@pytest.mark.parametrize("kwargs, match", [
    (dict(use_internal_tpc=False, param_items=[["tpc_version", "9.0"]]), "tpc_version='9.0'.*edge-mdt-tpc.*available"),
    (dict(param_items=[["sdsp_version", "3.16"], ["target_platform_version", "v1"]]), "give one"),
    (dict(param_items=[["target_platform_version", "v7"]]), "TPC version 'v7' is not available"),
    (dict(use_internal_tpc="no"), "use_internal_tpc must be True or False"),
])
def test_bad_tpc_spellings_are_refused(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _run(tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())
