"""Keras 3 post-training quantization, end to end (torch backend in the suite)."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.core import quant_math  # noqa: E402
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper  # noqa: E402


def _net():
    keras.utils.set_random_seed(0)
    x = keras.Input((16, 16, 3), name="img")
    y = layers.Conv2D(16, 3, padding="same", use_bias=False, name="c1")(x)
    y = layers.BatchNormalization(name="bn1")(y)
    y = layers.ReLU(6.0, name="r1")(y)
    z = layers.DepthwiseConv2D(3, padding="same", activation="relu", name="dw")(y)
    y = keras.ops.add(y, layers.Conv2D(16, 1, name="pw")(z))
    y = layers.GlobalAveragePooling2D(name="gap")(y)
    model = keras.Model(x, layers.Dense(10, name="fc")(y), name="net")
    bn = model.get_layer("bn1")
    rng = np.random.default_rng(0)
    bn.moving_mean.assign(rng.uniform(-0.2, 0.2, 16).astype("float32"))
    bn.moving_variance.assign(rng.uniform(0.5, 2.0, 16).astype("float32"))
    return model


def _batches():
    rng = np.random.default_rng(1)
    return [rng.normal(size=(16, 16, 16, 3)).astype("float32") for _ in range(3)]


@pytest.fixture(scope="module")
def quantized():
    data = _batches()
    return mct.ptq.keras_post_training_quantization(_net(), lambda: iter([[b] for b in data]))


def test_quantized_model_follows_the_float_model(quantized):
    q, info = quantized
    x = _batches()[0]
    f = np.asarray(keras.ops.convert_to_numpy(_net()(x)))
    y = np.asarray(keras.ops.convert_to_numpy(q(x)))
    sqnr = 10 * np.log10((f ** 2).sum() / ((f - y) ** 2).sum())
    assert sqnr > 25 and info is not None


def test_quantized_model_blocks_have_mcts_names_and_read_back(quantized):
    q, _ = quantized
    names = [layer.name for layer in q.layers]
    # the batch norm folded into the convolution (MCT's `<conv>_bn`); holders after the quantized tensors
    assert "quant_c1_bn" in names and "bn1" not in names
    holders = {l.name: l for l in q.layers if isinstance(l, KerasActivationQuantizationHolder)}
    assert {"img_activation_holder_quantizer", "r1_activation_holder_quantizer", "fc_activation_holder_quantizer"} <= set(holders)
    h = holders["r1_activation_holder_quantizer"].activation_holder_quantizer
    assert type(h).__name__ == "ActivationPOTInferableQuantizer" and h.num_bits == 8 and not h.signed
    assert np.log2(float(h.threshold_np[0])).is_integer()
    wrapper = q.get_layer("quant_c1_bn")
    assert isinstance(wrapper, KerasQuantizationWrapper)
    kq = wrapper.weights_quantizers["kernel"]
    assert type(kq).__name__ == "WeightsSymmetricInferableQuantizer" and kq.per_channel and kq.channel_axis == 3
    kernel = np.asarray(keras.ops.convert_to_numpy(wrapper.get_quantized_weights()["kernel"]))
    units = quant_math.grid_units(kernel.astype(np.float64), kq.grid)
    np.testing.assert_allclose(units, np.round(units), atol=1e-3)  # the kernel lies on its grid
    dw = q.get_layer("quant_dw").weights_quantizers["kernel"]
    assert dw.channel_axis == 2


def test_mixed_precision_under_a_weights_target():
    data = _batches()
    gen = lambda: iter([[b] for b in data])  # noqa: E731
    full = mct.core.keras_resource_utilization_data(_net(), gen)
    target = mct.core.ResourceUtilization(weights_memory=full.weights_memory * 0.6)
    q, info = mct.ptq.keras_post_training_quantization(_net(), gen, target_resource_utilization=target)
    bits = {l.name: l.weights_quantizers["kernel"].num_bits for l in q.layers if isinstance(l, KerasQuantizationWrapper)}
    assert info.final_resource_utilization.weights_memory <= target.weights_memory and min(bits.values()) < 8
    x = data[0]
    f, y = (np.asarray(keras.ops.convert_to_numpy(m(x))) for m in (_net(), q))
    assert 10 * np.log10((f ** 2).sum() / ((f - y) ** 2).sum()) > 15
    with pytest.raises(ValueError, match="Hessian-weighted mixed precision is not available for Keras"):
        mct.ptq.keras_post_training_quantization(
            _net(), gen, target_resource_utilization=target, core_config=mct.core.CoreConfig(
                mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(use_hessian_based_scores=True)))


def test_save_and_load_keep_the_quantized_model(quantized, tmp_path):
    q, _ = quantized
    path = tmp_path / "q.keras"
    q.save(path)
    loaded = mct.keras_load_quantized_model(path)
    x = _batches()[1]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(q(x)))
    w = loaded.get_layer("quant_c1_bn")
    assert isinstance(w, KerasQuantizationWrapper) and w.weights_quantizers["kernel"].num_bits == 8


def test_resource_utilization_data_as_for_pytorch():
    data = _batches()
    ru = mct.core.keras_resource_utilization_data(_net(), lambda: iter([[b] for b in data]))
    # 8-bit kernels only (float biases not counted): c1 3*3*3*16, dw 3*3*16, pw 16*16, fc 16*10
    assert ru.weights_memory == 432 + 144 + 256 + 160
    assert ru.activation_memory > 0 and ru.bops > 0


def _swish_net():
    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3))
    y = layers.Conv2D(8, 3, padding="same", name="c1")(x)
    y = layers.Activation("swish", name="sw")(y)
    y = layers.Conv2D(8, 3, padding="same", name="c2")(y)
    model = keras.Model(x, layers.Dense(4, name="fc")(layers.GlobalAveragePooling2D(name="gap")(y)))
    c1 = model.get_layer("c1")
    c1.kernel.assign(c1.kernel * 6.0)  # a wide swish output: its negative part is small against the threshold
    return model


def test_graph_corrections_run_on_keras_models():
    """Bias correction (the kernels' mean error through the core's kernel layout) and the shift-negative
    correction (a constant add, and a pad node with the shift where the next convolution pads 'same')."""
    from hwquant.core.pipeline import run_ptq
    from hwquant.keras import facade
    data = [np.random.default_rng(i).normal(size=(8, 12, 12, 3)).astype("float32") for i in range(2)]
    model = _swish_net()
    f = np.asarray(keras.ops.convert_to_numpy(model(data[0])))
    sqnr = {}
    for sn in (False, True):
        cc = mct.core.CoreConfig(mct.core.QuantizationConfig(shift_negative_activation_correction=sn))
        state, d = facade._session(model, lambda: iter([[b] for b in data]), cc, mct.get_target_platform_capabilities("4.0", "imx500"))
        run_ptq(state, d)
        q = state.adapter.build(state.graph, quantized=True)
        o = np.asarray(keras.ops.convert_to_numpy(q(data[0])))
        sqnr[sn] = 10 * np.log10((f ** 2).sum() / ((f - o) ** 2).sum())
        assert "bias_correction_error" in state.report  # corrections computed, then judged on the data
    assert state.report["shift_negative"] == 1
    assert {"sw_shift", "c2_pad"} <= {n.name for n in state.graph}
    # the function is kept (whether the shift gains here depends on the net; measured on real models elsewhere)
    assert sqnr[True] > 25 and sqnr[False] > 25


def test_bad_inputs_are_refused_clearly():
    from hwquant.core.representative_data import RepresentativeDataError
    from hwquant.keras.capture import CaptureError
    data = _batches()
    with pytest.raises(CaptureError, match="expected a keras.Model"):
        mct.ptq.keras_post_training_quantization(object(), lambda: iter([[data[0]]]))
    with pytest.raises(RepresentativeDataError, match="yielded no batches"):
        mct.ptq.keras_post_training_quantization(_net(), lambda: iter([]))
    with pytest.raises(RepresentativeDataError, match="NaN or inf"):
        mct.ptq.keras_post_training_quantization(_net(), lambda: iter([[np.full((2, 16, 16, 3), np.nan, "float32")]]))
    with pytest.raises(CaptureError, match="takes 1 input"):
        mct.ptq.keras_post_training_quantization(_net(), lambda: iter([[data[0], data[1]]]))
    with pytest.raises(ValueError, match="core_config must be a CoreConfig"):
        mct.ptq.keras_post_training_quantization(_net(), lambda: iter([[data[0]]]), core_config="fast")


@pytest.mark.parametrize("version, seed", [("1.0", 0), ("4.0", 1), ("4.0", 2)])
def test_mixed_precision_model_swaps_candidates_exactly(version, seed):
    """The sensitivity model (built once, each candidate's kernels and activation grid assigned) computes
    what a quantized model built for the same candidates computes (IMX500 4.0: activation candidates too)."""
    from hwquant.core import candidates as cand
    from hwquant.core.pipeline import calibrate, compute_parameters, prepare
    from hwquant.keras.facade import _session
    from hwquant.keras.mixed_precision import _set_candidate, _SwappableBlocks
    from hwquant.keras.quantized_model import build_quantized_model

    data = _batches()
    state, rep = _session(_net(), lambda: iter([[b] for b in data]), mct.core.CoreConfig(),
                          mct.get_target_platform_capabilities(version, "imx500"))
    prepare(state)
    calibrate(state, rep)
    cand.select_base_configs(state.graph)
    compute_parameters(state, all_candidates=True)
    configurable = [n for n in state.graph if len(n.candidates) > 1]
    activation_bits = {c.activation_quantization_cfg.activation_n_bits for n in configurable for c in n.candidates}
    assert len(configurable) >= 4 and (version == "1.0" or len(activation_bits) > 1)
    model = build_quantized_model(state.graph, blocks=_SwappableBlocks(configurable))
    rng = np.random.default_rng(seed)
    for node in configurable + configurable[:2]:  # (a node set twice keeps its last candidate)
        _set_candidate(model, node, node.candidates[rng.integers(len(node.candidates))])
    x = data[1]
    np.testing.assert_allclose(model.predict_on_batch(x), build_quantized_model(state.graph).predict_on_batch(x),
                               rtol=1e-5, atol=1e-6)


def test_concurrent_keras_quantizations_give_the_sequential_results():
    """3 threads x 2 PTQs of one model, threads switching every 10 us: each result equals the sequential one."""
    import sys
    import threading

    data, model = _batches(), _net()
    gen = lambda: iter([[b] for b in data])  # noqa: E731
    x = data[1]
    want = np.asarray(mct.ptq.keras_post_training_quantization(model, gen)[0].predict_on_batch(x))
    results, errors = [], []

    def quantize():
        try:
            for _ in range(2):
                results.append(np.asarray(mct.ptq.keras_post_training_quantization(model, gen)[0].predict_on_batch(x)))
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            errors.append(f"{type(e).__name__}: {e}")

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=quantize) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(before)
    assert errors == [] and len(results) == 6, errors[:3]
    assert all(np.array_equal(r, want) for r in results)
