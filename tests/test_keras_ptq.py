"""Keras 3 post-training quantization, end to end (torch backend in the suite)."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.core.numerics import quant_math  # noqa: E402
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
    holders = {layer.name: layer for layer in q.layers if isinstance(layer, KerasActivationQuantizationHolder)}
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
    bits = {layer.name: layer.weights_quantizers["kernel"].num_bits
            for layer in q.layers if isinstance(layer, KerasQuantizationWrapper)}
    assert info.final_resource_utilization.weights_memory <= target.weights_memory and min(bits.values()) < 8
    x = data[0]
    f, y = (np.asarray(keras.ops.convert_to_numpy(m(x))) for m in (_net(), q))
    assert 10 * np.log10((f ** 2).sum() / ((f - y) ** 2).sum()) > 15
    # Hessian-weighted distances (the same measurement loop as PyTorch's, traces by output probes)
    hq, hinfo = mct.ptq.keras_post_training_quantization(
        _net(), gen, target_resource_utilization=target, core_config=mct.core.CoreConfig(
            mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(use_hessian_based_scores=True)))
    assert hinfo.final_resource_utilization.weights_memory <= target.weights_memory
    y = np.asarray(keras.ops.convert_to_numpy(hq(x)))
    assert 10 * np.log10((f ** 2).sum() / ((f - y) ** 2).sum()) > 15


def test_keras_hessian_traces_match_their_closed_form():
    """Point h = the first Dense's output, output y = h W2 + b2: the probe estimate of the trace of
    d(v . y / |y|)/dh is ||W2||_F^2 / (E|y|^2 * size(h)) per sample, here within the probes' spread."""
    from hwquant.keras.capture import capture
    from hwquant.keras.mixed_precision import KerasSensitivityBackend

    rng = np.random.default_rng(0)
    inp = keras.Input((6,))
    model = keras.Model(inp, keras.layers.Dense(8, name="d2")(keras.layers.Dense(12, name="d1")(inp)))
    x = rng.standard_normal((256, 6)).astype(np.float32)
    graph = capture(model, [x[:4]])
    backend = KerasSensitivityBackend()
    backend.build(graph, [], ["d1", "d2"], [[x]], mct.core.MixedPrecisionQuantizationConfig())
    traces = backend.hessian_traces(["d1"], ["d2"])
    w2 = np.asarray(keras.ops.convert_to_numpy(model.get_layer("d2").kernel), np.float64)
    y = np.asarray(keras.ops.convert_to_numpy(model(x)), np.float64)
    energy = (y ** 2).sum(1).mean()
    expected = len(x) * (w2 ** 2).sum() / energy / 12
    assert traces["d1"] == pytest.approx(expected, rel=0.15)


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
    from hwquant.core.pipeline.stages import run_ptq
    data = [np.random.default_rng(i).normal(size=(8, 12, 12, 3)).astype("float32") for i in range(2)]
    model = _swish_net()
    f = np.asarray(keras.ops.convert_to_numpy(model(data[0])))
    sqnr = {}
    for sn in (False, True):
        cc = mct.core.CoreConfig(mct.core.QuantizationConfig(shift_negative_activation_correction=sn))
        state, d = _state_and_data(model, lambda: iter([[b] for b in data]), cc,
                                   mct.get_target_platform_capabilities("4.0", "imx500"))
        run_ptq(state, d)
        q = state.adapter.build(state.graph, quantized=True)
        o = np.asarray(keras.ops.convert_to_numpy(q(data[0])))
        sqnr[sn] = 10 * np.log10((f ** 2).sum() / ((f - o) ** 2).sum())
        assert state.report.bias_correction_error is not None  # corrections computed, then judged on the data
    assert state.report.shift_negative == 1
    assert {"sw_shift", "c2_pad"} <= {n.name for n in state.graph}
    # the function is kept (whether the shift gains here depends on the net; measured on real models elsewhere)
    assert sqnr[True] > 25 and sqnr[False] > 25


def test_bad_inputs_are_refused_clearly():
    from hwquant.core.pipeline.representative_data import RepresentativeDataError
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
    from hwquant.core.pipeline import candidates as cand
    from hwquant.core.pipeline.stages import calibrate, compute_parameters, prepare
    from hwquant.keras.mixed_precision import _set_candidate, _SwappableBlocks
    from hwquant.keras.quantized_model import build_quantized_model

    data = _batches()
    state, rep = _state_and_data(_net(), lambda: iter([[b] for b in data]), mct.core.CoreConfig(),
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


@pytest.mark.parametrize("version, custom", [("1.0", False), ("4.0", False), ("4.0", True)])
def test_downstream_runs_measure_what_whole_model_runs_measure(version, custom):
    """Candidates measured node by node (only the nodes downstream of the changed ones run again, the
    default on the torch backend) give the distances of whole-model runs (TensorFlow's and JAX's way), for
    the default distance and a custom one, whichever candidates are set."""
    from hwquant.core.pipeline import candidates as cand
    from hwquant.core.pipeline.stages import calibrate, compute_parameters, prepare
    from hwquant.keras.mixed_precision import KerasSensitivityBackend

    data = _batches()
    state, _ = _state_and_data(_net(), lambda: iter([[b] for b in data]), mct.core.CoreConfig(),
                               mct.get_target_platform_capabilities(version, "imx500"))
    prepare(state)
    calibrate(state, [[b] for b in data])
    cand.select_base_configs(state.graph)
    compute_parameters(state, all_candidates=True)
    configurable = [n for n in state.graph if len(n.candidates) > 1]
    observed = list(dict.fromkeys([n.name for n in configurable[-3:]] + state.graph.output_names()))
    cfg = mct.core.MixedPrecisionQuantizationConfig(
        distance_weighting_method=None,
        **({"compute_distance_fn": lambda r, q: np.abs(r - q).reshape(len(r), -1).mean(1)} if custom else {}))
    backends = [KerasSensitivityBackend(node_by_node=flag) for flag in (True, False)]
    for backend in backends:
        backend.build(state.graph, configurable, observed, [[data[1]], [data[2]]], cfg)
    rng = np.random.default_rng(0)
    base = {n.name: n.final_config for n in configurable}
    for trial in range(6):
        picked = {n.name: (n.candidates[rng.integers(len(n.candidates))] if trial and rng.random() < 0.4
                           else base[n.name]) for n in configurable}
        for backend in backends:
            for node in configurable:
                backend.set_candidate(node, picked[node.name])
        for k in range(2):
            fast, whole = (b.distances(k) for b in backends)
            np.testing.assert_allclose(fast, whole, rtol=2e-4, atol=1e-9)


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


def _multi_output_net(kind: str):
    """An MTCNN O-Net-like model: face probability, box and landmarks heads (widths 2, 4 and 10), as a
    list; with a rank-4 map among them; as a dict; nested."""
    keras.utils.set_random_seed(0)
    x = keras.Input((24, 24, 3), name="img")
    y = layers.Conv2D(8, 3, activation="relu", name="c1")(x)
    y = layers.MaxPooling2D(2, name="p1")(y)
    y = layers.Conv2D(16, 3, activation="relu", name="c2")(y)
    f = layers.Dense(32, activation="relu", name="fc")(layers.Flatten(name="flat")(y))
    prob = layers.Dense(2, activation="softmax", name="prob")(f)
    box, landmarks = layers.Dense(4, name="box")(f), layers.Dense(10, name="landmarks")(f)
    outputs = {"widths": [prob, box, landmarks],
               "ranks": [prob, layers.Conv2D(4, 1, name="map")(y), box],
               "dict": {"prob": prob, "box": box, "landmarks": landmarks},
               "nested": [prob, [box, layers.Conv2D(4, 1, name="map")(y)]]}[kind]
    return keras.Model(x, outputs, name=f"onet_{kind}")


def _faces():
    rng = np.random.default_rng(2)
    return [rng.normal(size=(16, 24, 24, 3)).astype("float32") for _ in range(3)]


def _same_structure(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same_structure(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same_structure, a, b))
    return not isinstance(b, (dict, list, tuple)) and np.shape(a) == np.shape(b)


def _heads(out):
    return [np.asarray(keras.ops.convert_to_numpy(t)) for t in keras.tree.flatten(out)]


MULTI_OUTPUT_KINDS = ["widths", "ranks", "dict", "nested"]


@pytest.fixture(scope="module")
def multi_output_quantized():
    data = _faces()
    return {kind: mct.ptq.keras_post_training_quantization(_multi_output_net(kind), lambda: iter([[b] for b in data]))[0]
            for kind in MULTI_OUTPUT_KINDS}


@pytest.mark.parametrize("kind", MULTI_OUTPUT_KINDS)
def test_multi_output_models_quantize_each_head(multi_output_quantized, kind):
    """(outputs of different widths crashed the bias-correction judge: 'setting an array element with a
    sequence ... inhomogeneous shape'); the quantized model returns the float model's structure (a dict
    by its keys, not a list in sorted-key order) and every head follows its float head."""
    q, x = multi_output_quantized[kind], _faces()[1]
    f_out, q_out = _multi_output_net(kind).predict_on_batch(x), q.predict_on_batch(x)
    assert _same_structure(f_out, q_out)
    for f, y in zip(_heads(f_out), _heads(q_out)):
        assert 10 * np.log10((f ** 2).sum() / ((f - y) ** 2).sum()) > 20


def test_multi_output_models_under_a_weights_target():
    """Heads of widths 2, 4 and 10 in a dict: the sensitivities read every head."""
    kind, data = "dict", _faces()
    gen = lambda: iter([[b] for b in data])  # noqa: E731
    full = mct.core.keras_resource_utilization_data(_multi_output_net(kind), gen)
    target = mct.core.ResourceUtilization(weights_memory=full.weights_memory * 0.6)
    core = mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(num_of_images=8))
    q, info = mct.ptq.keras_post_training_quantization(_multi_output_net(kind), gen, target_resource_utilization=target,
                                                       core_config=core)
    assert info.final_resource_utilization.weights_memory <= target.weights_memory
    assert min(layer.weights_quantizers["kernel"].num_bits
               for layer in q.layers if isinstance(layer, KerasQuantizationWrapper)) < 8
    x = data[0]
    f_out, q_out = _multi_output_net(kind).predict_on_batch(x), q.predict_on_batch(x)
    assert _same_structure(f_out, q_out)
    f, y = np.concatenate([h.ravel() for h in _heads(f_out)]), np.concatenate([h.ravel() for h in _heads(q_out)])
    assert 10 * np.log10((f ** 2).sum() / ((f - y) ** 2).sum()) > 10


@pytest.mark.parametrize("kind", MULTI_OUTPUT_KINDS)
def test_multi_output_models_export_keras_and_onnx(multi_output_quantized, kind, tmp_path):
    """.keras files (MCTQ and fake-quant) load with the model's output structure and outputs; Keras' ONNX
    export gives every head (matched by shape: the ONNX outputs are flat)."""
    KSF, QF = mct.exporter.KerasExportSerializationFormat, mct.exporter.QuantizationFormat
    q, x = multi_output_quantized[kind], _faces()[1]
    want = q.predict_on_batch(x)
    mctq = mct.keras_load_quantized_model(mct.exporter.keras_export_model(q, tmp_path / "q.keras"))
    got = mctq.predict_on_batch(x)
    assert _same_structure(want, got)
    for a, b in zip(_heads(want), _heads(got)):
        np.testing.assert_array_equal(a, b)
    fq = mct.keras_load_quantized_model(mct.exporter.keras_export_model(q, tmp_path / "fq.keras",
                                                                       quantization_format=QF.FAKELY_QUANT))
    got = fq.predict_on_batch(x)
    assert _same_structure(want, got)
    for a, b in zip(_heads(want), _heads(got)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    ort = pytest.importorskip("onnxruntime")
    if keras.backend.backend() == "tensorflow":
        pytest.importorskip("tf2onnx")
    path = mct.exporter.keras_export_model(q, tmp_path / "q.onnx", serialization_format=KSF.ONNX,
                                           quantization_format=QF.FAKELY_QUANT)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outs = {o.shape: o for o in session.run(None, {session.get_inputs()[0].name: x})}
    heads = _heads(want)
    assert len(outs) == len(heads)
    for head in heads:  # within a grid step or two (ONNX's Round may break ties the other way)
        values = np.unique(head)  # the output quantizer's grid step, read from the values on it
        step = np.diff(values).min() if len(values) > 1 else np.abs(head).max() / 64
        assert np.abs(outs[head.shape] - head).max() <= 2 * step * 1.0001


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TFLite files are written on Keras' TensorFlow backend")
def test_multi_output_models_export_tflite(multi_output_quantized, tmp_path):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    KSF, QF = mct.exporter.KerasExportSerializationFormat, mct.exporter.QuantizationFormat
    q, x = multi_output_quantized["widths"], _faces()[1]
    path = mct.exporter.keras_export_model(q, tmp_path / "q.tflite", serialization_format=KSF.TFLITE,
                                           quantization_format=QF.FAKELY_QUANT)
    interpreter = litert.Interpreter(model_path=str(path))
    inp = interpreter.get_input_details()[0]
    interpreter.resize_tensor_input(inp["index"], x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    outs = {t.shape: t for t in (interpreter.get_tensor(o["index"]) for o in interpreter.get_output_details())}
    heads = _heads(q.predict_on_batch(x))
    assert len(outs) == len(heads)
    for head in heads:
        assert np.abs(outs[head.shape] - head).max() <= np.abs(head).max() / 64


def _state_and_data(*args):
    from hwquant.keras.session import start_session
    session = start_session(*args)
    return session.state, session.data
