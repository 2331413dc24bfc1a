"""Keras 3 quantization-aware training and its trainable quantizers: the STE / LSQ quantizers (grid, gradients,
serialisation), init from PTQ, training with fit and with a custom step, saving mid-training, finalize,
export, the error paths. Runs on Keras' torch backend in the suite and on TensorFlow in .venv-tf."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.errors import InvalidConfigError  # noqa: E402
from hwquant.keras.capture import CaptureError  # noqa: E402
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasInferableQuantizer  # noqa: E402
from hwquant.keras.quantizers import KerasQuantizationWrapper  # noqa: E402
from hwquant.keras.trainable import quantizers as kq  # noqa: E402
from hwquant.tpc.enums import QuantizationMethod as QM  # noqa: E402
from hwquant.trainable_infrastructure import (BaseKerasTrainableQuantizer, TrainableQuantizerActivationConfig,  # noqa: E402
                                              TrainableQuantizerWeightsConfig, TrainingMethod, VariableGroup)

QAT_INIT = mct.qat.keras_quantization_aware_training_init_experimental
QAT_FINALIZE = mct.qat.keras_quantization_aware_training_finalize_experimental
BACKEND = keras.backend.backend()


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def backend_gradients(loss_fn, variables):
    """d loss_fn() / d variables, tensors of the backend Keras runs on (a user's custom training step)."""
    if BACKEND == "torch":
        import torch
        return [g.detach() for g in torch.autograd.grad(loss_fn(), [v.value for v in variables])]
    import tensorflow as tf
    with tf.GradientTape() as tape:
        loss = loss_fn()
    return tape.gradient(loss, [v.value for v in variables])


def gradients(loss_fn, variables):
    return [numpy(g) for g in backend_gradients(loss_fn, variables)]


# ------------------------------------------------------------------------------------- the quantizers
def wcfg(method, bits=8):
    params = {"threshold": [0.5, 1.0, 2.0]} if method != QM.UNIFORM else {"range_min": [-0.4, -1.0, -2.0],
                                                                          "range_max": [0.6, 1.5, 1.0]}
    return TrainableQuantizerWeightsConfig(weights_quantization_method=method, weights_n_bits=bits,
                                           weights_quantization_params=params, enable_weights_quantization=True,
                                           weights_channels_axis=-1, weights_per_channel_threshold=True,
                                           min_threshold=2 ** -16)


def acfg(method, bits=8, params=None):
    params = params or ({"threshold": 2.0, "is_signed": True} if method != QM.UNIFORM else
                        {"range_min": -1.3, "range_max": 2.2})
    return TrainableQuantizerActivationConfig(activation_quantization_method=method, activation_n_bits=bits,
                                              activation_quantization_params=params,
                                              enable_activation_quantization=True, min_threshold=2 ** -16)


ALL = [(target, method, training) for target in ("weights", "activation")
       for method in (QM.POWER_OF_TWO, QM.SYMMETRIC, QM.UNIFORM) for training in ("STE", "LSQ")]


def make(target, method, training, **kw):
    grid = "Uniform" if method == QM.UNIFORM else "Symmetric"
    cls = getattr(kq, f"{training}{grid}{'Weights' if target == 'weights' else 'Activation'}TrainableQuantizer")
    q = cls(wcfg(method) if target == "weights" else acfg(method), **kw)
    owner = layers.Layer(name="owner")
    q.initialize_quantization((4, 5, 3), "w" if target == "weights" else "", owner)
    return q, owner


def sample():
    return np.random.default_rng(0).normal(scale=1.5, size=(4, 5, 3)).astype("float32")


@pytest.mark.parametrize("target,method,training", ALL)
def test_starts_on_the_ptq_grid_converts_bitwise_and_round_trips(target, method, training):
    q, owner = make(target, method, training)
    x = sample()
    y0 = numpy(q(x))
    assert np.isfinite(y0).all() and len(np.unique(y0)) > 10
    for v in q.quantization_parameters():  # move the learned parameters off their start
        v.assign(numpy(v) * 1.37 + 0.11)
    y = numpy(q(x, training=False))
    inferable = q.convert_to_inferable_quantizers()
    assert isinstance(inferable, KerasInferableQuantizer)
    np.testing.assert_array_equal(numpy(inferable(x)), y)
    trained = numpy(q(x))  # the training step's forward pass
    if BACKEND == "tensorflow" and method != QM.UNIFORM and training == "STE":
        # TensorFlow's fused fake quantization rebuilds the grid from its ends: within a float32 rounding of
        # the step, a few float32 ulps (exactly the grid for a power-of-two threshold: no ties in these samples)
        np.testing.assert_allclose(trained, y, rtol=0, atol=np.abs(y).max() * 1e-6 if method == QM.SYMMETRIC else 0)
    else:
        np.testing.assert_array_equal(trained, y)
    # get_config / from_config: plain JSON data, the same quantizer again (variables restored with the layer)
    config = keras.saving.serialize_keras_object(q)
    again = keras.saving.deserialize_keras_object(config)
    assert type(again) is type(q) and again.get_config() == q.get_config()
    again.initialize_quantization((4, 5, 3), "w", layers.Layer(name="other"))
    for a, b in zip(again.quantization_parameters(), q.quantization_parameters()):
        a.assign(numpy(b))
    np.testing.assert_array_equal(numpy(again(x, training=False)), y)


def test_defaults_frozen_overrides_and_variable_groups():
    q, owner = make("weights", QM.SYMMETRIC, "STE")  # STE weights keep the PTQ threshold, as MCT
    assert q.get_trainable_variables(VariableGroup.QPARAMS) == [] and not owner.trainable_weights
    q, owner = make("activation", QM.POWER_OF_TWO, "STE")  # STE activations too, as MCT's Keras QAT
    assert q.get_trainable_variables(VariableGroup.QPARAMS) == [] and not owner.trainable_weights
    q, owner = make("activation", QM.POWER_OF_TWO, "STE", freeze_quant_params=False)
    assert len(q.get_trainable_variables(VariableGroup.QPARAMS)) == 1 and len(owner.trainable_weights) == 1
    q, owner = make("activation", QM.UNIFORM, "LSQ")
    assert len(q.get_trainable_variables(VariableGroup.QPARAMS)) == 2 and len(owner.trainable_weights) == 2
    q, owner = make("activation", QM.UNIFORM, "LSQ", freeze_quant_params=True)
    assert q.get_trainable_variables(VariableGroup.QPARAMS) == [] and len(owner.non_trainable_weights) == 2
    with pytest.raises(InvalidConfigError, match="VariableGroup"):
        q.get_trainable_variables("QPARAMS")


def test_power_of_two_threshold_learns_through_its_rounding():
    q = kq.STESymmetricActivationTrainableQuantizer(acfg(QM.POWER_OF_TWO, params={"threshold": 3.0, "is_signed": True}),
                                                    freeze_quant_params=False)
    owner = layers.Layer()
    q.initialize_quantization((3,), "", owner)
    (t,) = q.quantization_parameters()
    assert float(numpy(t)) == 4.0
    t.assign(5.0)
    x = np.array([100.0, -100.0, 0.3], "float32")
    (g,) = gradients(lambda: keras.ops.sum(q(x)), [t])
    # clipped above: qmax - z = 127, below: qmin - z = -128; scale = t / 128 passed straight through the rounding
    assert float(g) == pytest.approx((127 - 128) / 128)
    assert q.convert_to_inferable_quantizers().params["threshold"] == 8.0


@pytest.mark.parametrize("method", [QM.SYMMETRIC, QM.UNIFORM])
@pytest.mark.parametrize("target", ["weights", "activation"])
def test_lsq_gradients_match_the_paper(target, method):
    q, _ = make(target, method, "LSQ")
    x = sample()
    upstream = np.linspace(-1, 1, x.size).reshape(x.shape).astype("float32")
    xv = keras.Variable(x)
    variables = [xv] + q.quantization_parameters()
    grads = gradients(lambda: keras.ops.sum(keras.ops.multiply(q(xv), upstream)), variables)
    grid = q.grid()
    s, z = numpy(grid.scale).astype(np.float64), np.round(numpy(grid.zero_point)).astype(np.float64)
    xs = x / s
    r = np.round(xs) + z
    inside = (r >= grid.qmin) & (r <= grid.qmax)
    np.testing.assert_array_equal(grads[0], inside.astype("float32") * upstream)  # straight through, zero outside
    term = np.where(r < grid.qmin, grid.qmin - z, np.where(r > grid.qmax, grid.qmax - z, np.round(xs) - xs))
    n = x.size // (s.size if target == "weights" else x.shape[0])
    factor = 1 / np.sqrt(n * grid.qmax)
    expected = ((term * upstream).sum(axis=(0, 1)) if target == "weights" else (term * upstream).sum()) * factor
    if method == QM.UNIFORM:
        np.testing.assert_allclose(grads[1], expected.reshape(grads[1].shape), rtol=1e-4, atol=1e-6)
        dz = np.where(~inside, -s * upstream, 0)
        dz = dz.sum(axis=(0, 1)) if target == "weights" else dz.sum()
        np.testing.assert_allclose(grads[2], np.reshape(dz, grads[2].shape), rtol=1e-4, atol=1e-6)
    else:  # threshold t = s * 2**(n-1)
        np.testing.assert_allclose(grads[1], (expected / 128).reshape(grads[1].shape), rtol=1e-4, atol=1e-6)


def test_bad_quantizer_configs_are_refused():
    with pytest.raises(InvalidConfigError, match="needs a TrainableQuantizerWeightsConfig"):
        kq.STESymmetricWeightsTrainableQuantizer(acfg(QM.SYMMETRIC))
    with pytest.raises(InvalidConfigError, match="implements"):
        kq.STESymmetricWeightsTrainableQuantizer(wcfg(QM.UNIFORM))
    q = kq.STESymmetricWeightsTrainableQuantizer(wcfg(QM.SYMMETRIC))
    with pytest.raises(InvalidConfigError, match="3 per-channel parameters but the tensor has 7"):
        q.initialize_quantization((2, 7), "kernel", layers.Layer())
    with pytest.raises(InvalidConfigError, match="initialized by the layer"):
        q.grid()
    assert issubclass(type(q), BaseKerasTrainableQuantizer)


# ------------------------------------------------------------------------------------- QAT on a model
def _net():
    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3), name="img")
    y = layers.Conv2D(8, 3, padding="same", use_bias=False, name="c1")(x)
    y = layers.BatchNormalization(name="bn1")(y)
    y = layers.ReLU(name="r1")(y)
    z = layers.DepthwiseConv2D(3, padding="same", activation="relu", name="dw")(y)
    y = keras.ops.add(y, layers.Conv2D(8, 1, name="pw")(z))
    y = layers.GlobalAveragePooling2D(name="gap")(y)
    return keras.Model(x, layers.Dense(5, name="fc")(y), name="net")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(48, 12, 12, 3)).astype("float32")
    return x, rng.integers(0, 5, 48)


def gen_of(x):
    return lambda: iter([[x[i:i + 16]] for i in range(0, len(x), 16)])


@pytest.fixture(scope="module")
def qat_model(data):
    model, info, custom_objects = QAT_INIT(_net(), gen_of(data[0]))
    return model, info, custom_objects


def _compiled(model):
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_init_gives_the_ptq_model_and_trainable_quantizers(data, qat_model):
    model, info, custom_objects = qat_model
    ptq, _ = mct.ptq.keras_post_training_quantization(_net(), gen_of(data[0]))
    np.testing.assert_array_equal(numpy(model(data[0][:8], training=False)), numpy(ptq(data[0][:8])))
    wrappers = [layer for layer in model.layers if isinstance(layer, KerasQuantizationWrapper)]
    holders = [layer for layer in model.layers if isinstance(layer, KerasActivationQuantizationHolder)]
    assert {w.name for w in wrappers} == {"quant_c1_bn", "quant_dw", "quant_pw", "quant_fc"}
    assert all(isinstance(w.weights_quantizers["kernel"], kq.STESymmetricWeightsTrainableQuantizer) for w in wrappers)
    assert all(isinstance(h.activation_holder_quantizer, kq.STESymmetricActivationTrainableQuantizer) for h in holders)
    names = {v.path for v in model.trainable_variables}
    assert "quant_fc/fc/kernel" in names and "r1_activation_holder_quantizer/threshold" not in names  # (as MCT)
    assert "r1_activation_holder_quantizer/threshold" in {v.path for v in model.non_trainable_variables}
    learned, _, _ = QAT_INIT(_net(), gen_of(data[0]), qat_config=mct.qat.QATConfig(
        activation_quantizer_params_override={"freeze_quant_params": False}))
    assert "r1_activation_holder_quantizer/threshold" in {v.path for v in learned.trainable_variables}
    assert info is not None and "STESymmetricWeightsTrainableQuantizer" in custom_objects


def test_fit_save_mid_training_load_train_on_and_finalize_bitwise(data, qat_model, tmp_path):
    x, y = data
    model, _, custom_objects = QAT_INIT(_net(), gen_of(x))
    before = numpy(model(x[:8], training=False))
    history = _compiled(model).fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    trained = numpy(model(x[:8], training=False))
    assert not np.array_equal(trained, before)
    model.save(tmp_path / "mid.keras")
    loaded = keras.saving.load_model(tmp_path / "mid.keras")
    np.testing.assert_array_equal(numpy(loaded(x[:8], training=False)), trained)
    assert keras.saving.load_model(tmp_path / "mid.keras", custom_objects=custom_objects) is not None
    _compiled(loaded).fit(x, y, epochs=1, batch_size=16, verbose=0)  # trains on
    assert not np.array_equal(numpy(loaded(x[:8], training=False)), trained)

    final = QAT_FINALIZE(model)
    np.testing.assert_array_equal(numpy(final(x[:8])), trained)  # bitwise the trained model in inference
    np.testing.assert_array_equal(numpy(model(x[:8], training=False)), trained)  # the QAT model is unchanged
    assert not any(isinstance(q, BaseKerasTrainableQuantizer) for layer in final.layers
                   for q in getattr(layer, "weights_quantizers", {}).values())
    # the kernels are on their grids and the holders are the inferable quantizers of the learned thresholds
    fc = final.get_layer("quant_fc")
    kernel = numpy(fc.layer.kernel)
    np.testing.assert_array_equal(numpy(fc.weights_quantizers["kernel"](kernel)), kernel)
    holder = final.get_layer("r1_activation_holder_quantizer").activation_holder_quantizer
    assert isinstance(holder, KerasInferableQuantizer) and final.hwquant_metadata["method"] == "qat"
    # the finalized model saves, loads and exports as a PTQ model does
    final.save(tmp_path / "final.keras")
    again = mct.keras_load_quantized_model(tmp_path / "final.keras")
    np.testing.assert_array_equal(numpy(again(x[:8])), trained)
    mct.exporter.keras_export_model(final, str(tmp_path / "final_export.keras"))
    with pytest.raises(InvalidConfigError, match="already finalized"):
        QAT_FINALIZE(final)


def test_custom_training_step_on_the_backend(data):
    x, y = data
    model, _, _ = QAT_INIT(_net(), gen_of(x), qat_config=mct.qat.QATConfig(
        weight_training_method=TrainingMethod.LSQ, activation_training_method=TrainingMethod.LSQ))
    optimizer = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    thresholds = [v for v in model.trainable_variables if v.path.endswith("threshold")]
    start = [numpy(v).copy() for v in thresholds]
    assert any(v.path.startswith("quant_fc/") for v in thresholds)  # LSQ weight thresholds learn
    losses = []
    for _ in range(3):
        def loss():
            return loss_fn(y[:16], model(x[:16], training=True))
        grads = backend_gradients(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(numpy(loss())))
    assert np.isfinite(losses).all()
    assert any(not np.array_equal(numpy(v), s) for v, s in zip(thresholds, start))
    final = QAT_FINALIZE(model)
    np.testing.assert_array_equal(numpy(final(x[:8])), numpy(model(x[:8], training=False)))


def test_mixed_precision_at_init(data):
    x, _ = data
    ru = mct.core.keras_resource_utilization_data(_net(), gen_of(x))
    target = mct.core.ResourceUtilization(weights_memory=ru.weights_memory * 0.6)
    model, info, _ = QAT_INIT(_net(), gen_of(x), target_resource_utilization=target,
                              core_config=mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig()))
    bits = {w.name: w.weights_quantizers["kernel"].num_bits for w in model.layers if isinstance(w, KerasQuantizationWrapper)}
    assert min(bits.values()) < 8 and info.final_resource_utilization.weights_memory <= target.weights_memory
    final = QAT_FINALIZE(model)
    np.testing.assert_array_equal(numpy(final(x[:8])), numpy(model(x[:8], training=False)))


def test_errors(data, qat_model):
    x, _ = data
    with pytest.raises(InvalidConfigError, match="not quantized"):
        QAT_FINALIZE(_net())
    ptq, _ = mct.ptq.keras_post_training_quantization(_net(), gen_of(x))
    with pytest.raises(InvalidConfigError, match="post-training"):
        QAT_FINALIZE(ptq)
    with pytest.raises(InvalidConfigError, match="QATConfig"):
        QAT_INIT(_net(), gen_of(x), qat_config={"weight_training_method": "STE"})
    with pytest.raises(InvalidConfigError, match="DQA"):
        QAT_INIT(_net(), gen_of(x), qat_config=mct.qat.QATConfig(weight_training_method=TrainingMethod.DQA))
    with pytest.raises(InvalidConfigError, match="does not take"):
        QAT_INIT(_net(), gen_of(x), qat_config=mct.qat.QATConfig(weight_quantizer_params_override={"lr": 1}))
    model, _, _ = QAT_INIT(_net(), gen_of(x))
    kernel = model.get_layer("quant_fc").layer.kernel
    kernel.assign(np.full(kernel.shape, np.nan, "float32"))
    with pytest.raises(InvalidConfigError, match="training diverged.*quant_fc"):
        QAT_FINALIZE(model)

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = layers.Dense(3)

        def call(self, t):
            return self.d(t)
    with pytest.raises(CaptureError, match="subclassed model"):
        QAT_INIT(Sub(), lambda: iter([[np.zeros((2, 4), "float32")]]))
    with pytest.raises((CaptureError, InvalidConfigError), match="already quantized"):
        QAT_INIT(ptq, gen_of(x))


def test_strided_pointwise_convolutions_train(data):
    """A 1x1 convolution with strides (a residual shortcut, fer's and ResNet's) trains on every backend:
    torch 2.13's CPU backward of it over a channels-last input crashes, so the trainable wrapper computes
    it as subsampling + 1x1 convolution, the same function."""
    from hwquant.keras.quantizers import _subsampled_pointwise, strided_pointwise_on_torch
    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3))
    y = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    y = layers.Add()([layers.Conv2D(8, 1, strides=2, padding="same", name="shortcut")(y),
                      layers.Conv2D(8, 3, strides=2, padding="same")(y)])
    model = keras.Model(x, layers.Dense(5)(layers.GlobalAveragePooling2D()(y)))
    shortcut = model.get_layer("shortcut")
    assert strided_pointwise_on_torch(shortcut) == (BACKEND == "torch")
    inputs = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(4, 11, 11, 8)).astype("float32"))
    np.testing.assert_allclose(numpy(_subsampled_pointwise(shortcut, inputs)), numpy(shortcut(inputs)), rtol=1e-5, atol=1e-6)
    qat, _, _ = QAT_INIT(model, gen_of(data[0]))
    history = _compiled(qat).fit(data[0], data[1], epochs=1, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    final = QAT_FINALIZE(qat)
    np.testing.assert_array_equal(numpy(final(data[0][:8])), numpy(qat(data[0][:8], training=False)))


def test_finalized_model_exports_to_onnx_and_int8_tflite(data, tmp_path):
    """The finalized QAT model exports like a PTQ model: ONNX (Keras' exporter; ONNX Runtime within one
    step of the output grid) and, on TensorFlow, INT8 TFLite with every layer within one step of the simulation."""
    from hwquant.exporter import KerasExportSerializationFormat as KSF
    from hwquant.exporter import QuantizationFormat as QF
    x, y = data
    qat, _, _ = QAT_INIT(_net(), gen_of(x))
    _compiled(qat).fit(x, y, epochs=1, batch_size=16, verbose=0)
    final = QAT_FINALIZE(qat)
    expected = numpy(final(x[:4]))
    step = float(final.get_layer("fc_activation_holder_quantizer").activation_holder_quantizer.grid.scale)
    ort = pytest.importorskip("onnxruntime")
    if BACKEND == "tensorflow":
        pytest.importorskip("tf2onnx")
    path = mct.exporter.keras_export_model(final, tmp_path / "q.onnx", serialization_format=KSF.ONNX,
                                           quantization_format=QF.FAKELY_QUANT)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert np.abs(session.run(None, {session.get_inputs()[0].name: x[:4]})[0] - expected).max() <= step * 1.0001
    if BACKEND != "tensorflow":
        return
    pytest.importorskip("ai_edge_litert.interpreter")
    from hwquant.keras.tflite_int8 import layer_parity
    path = mct.exporter.keras_export_model(final, tmp_path / "q.tflite", serialization_format=KSF.TFLITE,
                                           quantization_format=QF.INT8)
    steps = layer_parity(final, path.read_bytes(), x[:1])
    assert steps and max(steps.values()) <= 1 + 1e-3, steps


def test_a_qat_model_saved_mid_training_on_torch_loads_and_trains_on_any_backend(data):
    """tests/data holds a QAT model saved after one epoch on Keras' torch backend; CI loads it on torch and on
    TensorFlow: the same inference outputs (within one output step), it trains on, and finalizes bitwise.
    (compile=False: Keras saves the torch backend's own optimizer class, which TensorFlow cannot rebuild.)"""
    from pathlib import Path
    folder = Path(__file__).parent / "data"
    model = keras.saving.load_model(folder / "qat_mid_training_on_torch_backend.keras", compile=False)
    expected = np.load(folder / "qat_mid_training_on_torch_backend.npz")
    got = numpy(model(expected["x"], training=False))
    step = float(numpy(model.get_layer("fc_activation_holder_quantizer").activation_holder_quantizer.grid().scale))
    assert np.abs(got - expected["y"]).max() <= step * 1.0001 and (got == expected["y"]).mean() >= 0.95
    _compiled(model).fit(data[0], data[1], epochs=1, batch_size=16, verbose=0)
    trained = numpy(model(expected["x"], training=False))
    assert not np.array_equal(trained, got)
    np.testing.assert_array_equal(numpy(QAT_FINALIZE(model)(expected["x"])), trained)


@pytest.mark.skipif(BACKEND != "torch", reason="a torch autograd graph")
def test_a_training_step_leaves_nothing_alive():
    """The custom gradient keeps no output of the step alive: on the torch backend an output held by the
    gradient closure forms a reference cycle through the autograd graph, and every step's activations
    stayed in memory (Keras GPTQ of MobileNetV2: 1 GB per step)."""
    import weakref
    q, _ = make("activation", QM.SYMMETRIC, "LSQ")
    xv = keras.Variable(sample())
    y = q(xv)
    alive = weakref.ref(y)
    import torch
    torch.autograd.grad(keras.ops.sum(y), [v.value for v in q.quantization_parameters()])
    del y
    assert alive() is None


def test_sequential_model(data):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((12, 12, 3)), layers.Conv2D(4, 3, activation="relu"), layers.Flatten(),
                              layers.Dense(5)])
    x, y = data
    qat, _, _ = QAT_INIT(model, gen_of(x))
    ptq, _ = mct.ptq.keras_post_training_quantization(model, gen_of(x))
    np.testing.assert_array_equal(numpy(qat(x[:8], training=False)), numpy(ptq(x[:8])))
    _compiled(qat).fit(x, y, epochs=1, batch_size=16, verbose=0)
    np.testing.assert_array_equal(numpy(QAT_FINALIZE(qat)(x[:8])), numpy(qat(x[:8], training=False)))


@pytest.mark.skipif(BACKEND != "torch", reason="the torch backend's autograd Function")
@pytest.mark.parametrize("axis,zero_point,learn_rounding", [(None, False, False), (None, True, True), (-1, False, True),
                                                            (-1, True, False), (1, True, True)])
def test_torch_fake_quantize_is_quant_maths(axis, zero_point, learn_rounding):
    """On Keras' torch backend the trainable quantizers fake-quantize through one autograd Function written in
    place (keras/trainable/torch_fake_quant.py): its values and its gradients to x, the scale and the zero point
    equal quant_math's (the other backends' arithmetic; torch.equal: a zero gradient may carry the upstream's
    sign), over a grid cutting through the values."""
    import torch

    from hwquant.core.numerics import quant_math
    from hwquant.keras.trainable import torch_fake_quant
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.normal(scale=2.0, size=(6, 5, 4)).astype("float32"))
    x = x.permute(0, 2, 1).contiguous().permute(0, 2, 1)  # (a permuted layout too, as Keras' layers hand over)
    g = torch.tensor(rng.normal(size=(6, 4, 5)).astype("float32")).permute(0, 2, 1)
    channels = 1 if axis is None else x.shape[axis]
    scale = torch.tensor(rng.uniform(0.02, 0.05, channels).astype("float32")).reshape(() if axis is None else (-1,))
    zp = torch.tensor(np.round(rng.uniform(100, 140, channels)).astype("float32")).reshape(scale.shape)
    qmin, qmax = (0, 255) if zero_point else (-128, 127)
    grid = quant_math.AffineGrid(scale, zp if zero_point else 0.0, qmin, qmax, axis)
    y, inside = quant_math.affine_fake_quantize_forward(x, grid)
    assert 0 < int(inside.sum()) < inside.numel()
    expected = quant_math.affine_fake_quantize_gradients(g, x, y, inside, scale, zp, axis, learn_rounding, 0.3, True,
                                                         zero_point)
    leaves = [t.clone().requires_grad_(True) for t in (x, scale, zp)]
    got_y = torch_fake_quant.affine_fake_quantize(leaves[0], leaves[1], leaves[2] if zero_point else None, qmin, qmax,
                                                  axis, learn_rounding, 0.3)
    assert torch.equal(got_y, y)
    got_y.backward(g)
    for got, want in zip(leaves, expected):
        if want is None:
            assert got.grad is None
        else:
            assert torch.equal(got.grad, want.reshape(got.shape))


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's graph")
def test_fit_runs_the_training_step_as_a_tensorflow_graph(data, monkeypatch):
    """model.fit on the TensorFlow backend traces the QAT model's step once into a tf.function: every trainable
    quantizer is called while TensorFlow builds the graph, never eagerly step by step (an eager step is several
    times slower than the graph MCT's tf.keras trains)."""
    import tensorflow as tf
    x, y = data
    model, _, _ = QAT_INIT(_net(), gen_of(x))
    calls = []
    original = kq.TrainableAffineQuantizer.__call__

    def spy(self, inputs, training=True):
        calls.append(tf.executing_eagerly())
        return original(self, inputs, training=training)
    monkeypatch.setattr(kq.TrainableAffineQuantizer, "__call__", spy)
    quantizers = sum(isinstance(layer, KerasActivationQuantizationHolder) or
                     isinstance(getattr(layer, "weights_quantizers", {}).get("kernel"), BaseKerasTrainableQuantizer)
                     for layer in model.layers)
    history = _compiled(model).fit(x, y, epochs=3, batch_size=8, verbose=0)  # 18 steps
    assert np.isfinite(history.history["loss"]).all() and not model.run_eagerly
    assert calls and not any(calls), "a quantizer ran eagerly during fit"
    assert len(calls) <= 2 * quantizers, f"{len(calls)} quantizer calls for {quantizers} quantizers over 18 steps"


@pytest.mark.skipif(BACKEND != "torch", reason="the torch backend's grid")
@pytest.mark.parametrize("target,method", [("weights", QM.POWER_OF_TWO), ("weights", QM.SYMMETRIC),
                                           ("activation", QM.POWER_OF_TWO), ("activation", QM.SYMMETRIC)])
def test_torch_symmetric_grid_is_the_generic_grid(target, method):
    """On the torch backend a symmetric / power-of-two quantizer computes its grid in torch's operations: the same
    scale and the same gradient to the threshold as the generic grid (quantizer_spec.grid_of), powers of two
    exactly, a hair above them, and thresholds below min_threshold included."""
    import torch
    q, _ = make(target, method, "LSQ")
    (t,) = q.quantization_parameters()
    values = [2.0 ** -17, 0.5, 0.5000001, 0.75, 1.0, 3.0] if target == "activation" else [[2.0 ** -20, 0.5, 0.7]]
    for value in values:
        t.assign(np.full(t.shape, value, "float32") if target == "activation" else np.asarray(value, "float32"))
        generic, fast = q.grid(), q._torch_symmetric_grid()
        assert (generic.qmin, generic.qmax, generic.axis) == (fast.qmin, fast.qmax, fast.axis)
        assert torch.equal(fast.scale, generic.scale)
        weights = torch.linspace(-1, 1, int(np.prod(t.shape)) or 1).reshape(tuple(t.shape))
        (a,) = torch.autograd.grad((generic.scale * weights).sum(), [t.value])
        (b,) = torch.autograd.grad((fast.scale * weights).sum(), [t.value])
        assert torch.equal(a, b)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's fused operations")
@pytest.mark.parametrize("method", [QM.POWER_OF_TWO, QM.SYMMETRIC])
@pytest.mark.parametrize("axis,signed", [(None, True), (None, False), (-1, True), (1, True)])
def test_tensorflow_trains_with_the_fused_fake_quantization(method, axis, signed):
    """On TensorFlow a symmetric / power-of-two STE quantizer trains through TensorFlow's fused fake-quantization
    operations (per tensor; per channel along the last axis or another, transposed): the grid of quant_math (a
    power-of-two one exactly), the input's gradient on [min, max], the learned threshold's from the values outside
    (straight through its power-of-two rounding, none below min_threshold); powers of two rounded up exactly."""
    import tensorflow as tf

    from hwquant.core.numerics import quant_math
    from hwquant.keras.trainable import tf_fake_quant
    rng = np.random.default_rng(3)
    ceilings = np.array([2.0 ** -17, 0.5, 0.5000001, 0.75, 1.0, 3.0], "float32")
    np.testing.assert_array_equal(tf_fake_quant.power_of_two_ceil(tf.constant(ceilings)).numpy(),
                                  quant_math.power_of_two_threshold(ceilings.astype(np.float64), 2.0 ** -20))
    x = tf.constant(rng.normal(scale=2.0, size=(6, 5, 4)).astype("float32"))
    g = tf.constant(rng.normal(size=(6, 5, 4)).astype("float32"))
    channels = 1 if axis is None else x.shape[axis]
    values = rng.uniform(1.5, 5.0, channels).astype("float32")
    if channels > 1:
        values[0] = 1e-9  # below min_threshold: no gradient
    threshold = tf.Variable(values.reshape(() if axis is None else (-1,)) if channels > 1 else values[0])
    power_of_two, bits, steps = method == QM.POWER_OF_TWO, 4, 2.0 ** (3 if signed else 4)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf_fake_quant.symmetric_fake_quantize(x, threshold, 2.0 ** -16, power_of_two, bits, signed, axis)
    gx, gt = tape.gradient(y, [x, threshold], output_gradients=g)
    t = np.maximum(values, 2.0 ** -16)
    t = quant_math.power_of_two_threshold(t.astype(np.float64), 2.0 ** -16) if power_of_two else t
    view = [-1 if d == (axis or 0) % 3 else 1 for d in range(3)] if axis is not None else []
    s = np.asarray(t / steps, "float32").reshape(view)
    qmin, qmax = (-steps if signed else 0), steps - 1
    want = np.clip(np.round(x.numpy() / s), qmin, qmax) * s
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=0 if power_of_two else float(s.max()) * 1e-5)
    low, high = qmin * s, qmax * s
    inside = (x.numpy() >= low) & (x.numpy() <= high)
    np.testing.assert_array_equal(gx.numpy(), np.where(inside, g.numpy(), 0))
    reduce = tuple(d for d in range(3) if axis is None or d != axis % 3)
    expected = ((g.numpy() * (x.numpy() < low)).sum(reduce) * qmin + (g.numpy() * (x.numpy() > high)).sum(reduce) * qmax) / steps
    expected = np.where(values >= 2.0 ** -16, expected, 0).reshape(np.shape(threshold.numpy()))
    np.testing.assert_allclose(gt.numpy(), expected, rtol=1e-5, atol=1e-5)
