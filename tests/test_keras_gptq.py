"""Keras 3 GPTQ: the soft-rounding / STE quantizers, the config, the facade on the framework-free loop
(gptq/training.py), on Keras' torch backend in the suite and on TensorFlow in .venv-tf."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.core.numerics import quant_math  # noqa: E402
from hwquant.errors import InvalidConfigError  # noqa: E402
from hwquant.gptq import RoundingType  # noqa: E402
from hwquant.keras.gptq import quantizers as gq  # noqa: E402
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper  # noqa: E402
from hwquant.tpc.enums import QuantizationMethod as QM  # noqa: E402
from hwquant.trainable_infrastructure import TrainableQuantizerWeightsConfig, VariableGroup  # noqa: E402

GPTQ = mct.gptq.keras_gradient_post_training_quantization


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


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


X = np.random.default_rng(1).normal(size=(48, 12, 12, 3)).astype("float32")
CORE = mct.core.CoreConfig(mct.core.QuantizationConfig(weights_n_bits=4))


def gen(batch=16):
    return lambda: iter([[X[i:i + batch]] for i in range(0, len(X), batch)])


def sqnr(model, q):
    f, y = numpy(model(X)), numpy(q(X))
    return 10 * np.log10((f ** 2).sum() / ((f - y) ** 2).sum())


# ------------------------------------------------------------------------------------- quantizers
def wcfg(method):
    params = {"threshold": [0.5, 1.0, 2.0]} if method != QM.UNIFORM else {"range_min": [-0.4, -1.0, -2.0],
                                                                          "range_max": [0.6, 1.5, 1.0]}
    return TrainableQuantizerWeightsConfig(weights_quantization_method=method, weights_n_bits=4,
                                           weights_quantization_params=params, enable_weights_quantization=True,
                                           weights_channels_axis=-1, weights_per_channel_threshold=True,
                                           min_threshold=2 ** -16)


@pytest.mark.parametrize("cls,method", [(gq.SymmetricSoftRoundingGPTQ, QM.SYMMETRIC), (gq.UniformSoftRoundingGPTQ, QM.UNIFORM),
                                        (gq.STESymmetricGPTQ, QM.POWER_OF_TWO), (gq.STEUniformGPTQ, QM.UNIFORM)])
def test_gptq_quantizers_start_at_nearest_rounding_and_round_trip(cls, method):
    w = np.random.default_rng(0).normal(scale=0.6, size=(3, 4, 3)).astype("float32")
    q = cls(wcfg(method))
    q.init_rounding(w)
    owner = layers.Layer()
    q.initialize_quantization(w.shape, "kernel", owner)
    nearest = numpy(q.convert_to_inferable_quantizers()(w))
    np.testing.assert_array_equal(numpy(q(w, training=False)), nearest)  # hard rounding starts where PTQ rounds
    assert q.get_trainable_variables(VariableGroup.WEIGHTS) == [q.auxvar]
    assert q.get_trainable_variables(VariableGroup.QPARAMS) == []  # the PTQ grid stays unless asked
    lo, hi = quant_math.grid_range(quant_math.make_grid(method, 4, q.inferable_params(), axis=-1))
    soft = numpy(q(w, training=True))  # soft rounding: between the grid neighbours, inside the grid's range
    assert np.all((soft >= np.asarray(lo) - 1e-6) & (soft <= np.asarray(hi) + 1e-6))
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(q))
    assert type(again) is cls and again.get_config() == q.get_config()
    learning = cls(wcfg(method), quantization_parameter_learning=True)
    learning.init_rounding(w)
    learning.initialize_quantization(w.shape, "kernel", layers.Layer())
    assert learning.get_trainable_variables(VariableGroup.QPARAMS)


def test_soft_rounding_regulariser_is_zero_once_rounding_is_hard():
    w = np.random.default_rng(0).normal(scale=0.6, size=(3, 4, 3)).astype("float32")
    q = gq.SymmetricSoftRoundingGPTQ(wcfg(QM.SYMMETRIC))
    q.init_rounding(w)
    q.initialize_quantization(w.shape, "kernel", layers.Layer())
    assert float(numpy(q.rounding_regularization(2.0))) > 0
    q.auxvar.assign(np.where(numpy(q.auxvar) > 0, 50.0, -50.0).astype("float32"))
    assert float(numpy(q.rounding_regularization(2.0))) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(InvalidConfigError, match="init_rounding"):
        gq.SymmetricSoftRoundingGPTQ(wcfg(QM.SYMMETRIC)).initialize_quantization(w.shape, "kernel", layers.Layer())


# ------------------------------------------------------------------------------------- config
def test_config_defaults_and_optimizers_of_another_framework():
    cfg = mct.gptq.get_keras_gptq_config(n_epochs=3)
    assert isinstance(cfg.optimizer, keras.optimizers.Adam) and float(cfg.optimizer.learning_rate) == pytest.approx(3e-2)
    assert isinstance(cfg.optimizer_bias, keras.optimizers.SGD) and cfg.hessian_weights_config.per_sample
    assert cfg.regularization_factor == 10.0 and cfg.gradual_activation_quantization_config is not None
    plain = mct.gptq.get_keras_gptq_config(n_epochs=3, use_hessian_based_weights=False, use_hessian_sample_attention=False,
                                           gradual_activation_quantization=False)
    assert plain.hessian_weights_config is None and plain.regularization_factor == 0.01
    with pytest.raises(ValueError, match="sample-layer attention"):
        mct.gptq.get_keras_gptq_config(n_epochs=3, use_hessian_based_weights=False)
    ForeignAdam = type("Adam", (), {"__module__": "torch.optim.adam"})
    with pytest.raises(TypeError, match="keras.optimizers.Optimizer.*torch.optim.adam.Adam"):
        mct.gptq.get_keras_gptq_config(n_epochs=3, optimizer=ForeignAdam())
    foreign = mct.gptq.GradientPTQConfig(n_epochs=1, loss=None, optimizer=ForeignAdam(), optimizer_rest=None,
                                         train_bias=False, hessian_weights_config=None,
                                         gradual_activation_quantization_config=None, regularization_factor=0.0)
    with pytest.raises(InvalidConfigError, match="torch optimizer"):
        GPTQ(_net(), gen(), foreign, core_config=CORE)


# ------------------------------------------------------------------------------------- GPTQ on a model
@pytest.mark.parametrize("kw,rounding", [({}, RoundingType.SoftQuantizer),
                                         ({"use_hessian_based_weights": False, "use_hessian_sample_attention": False,
                                           "gradual_activation_quantization": False}, RoundingType.STE)])
def test_gptq_trains_and_returns_a_ptq_like_model(kw, rounding, tmp_path):
    model = _net()
    cfg = mct.gptq.get_keras_gptq_config(n_epochs=6, **kw)
    cfg.rounding_type = rounding
    logged = []
    cfg.log_function = lambda loss, grads, values: logged.append(loss)
    q, info = GPTQ(model, gen(), cfg, core_config=CORE)
    d = info.gptq_info_dict
    assert d["steps"] == 18 and len(d["losses"]) == 18 and logged == d["losses"]
    assert np.isfinite(d["losses"]).all() and d["trained_layers"] == ["c1_bn", "dw", "pw", "fc"]
    if rounding == RoundingType.SoftQuantizer:  # (the regulariser anneals: the loss falls)
        assert d["losses"][-1] < d["losses"][0]
    assert d["bias_correction"] in ("analytic", "measured") and set(d["output_error"]) == {"analytic", "measured"}
    assert d["output_error"][d["bias_correction"]] == min(d["output_error"].values())
    assert sqnr(model, q) > 20
    fc = q.get_layer("quant_fc")
    assert isinstance(fc, KerasQuantizationWrapper) and q.hwquant_metadata["method"] == "gptq"
    kernel = numpy(fc.layer.kernel)
    np.testing.assert_array_equal(numpy(fc.weights_quantizers["kernel"](kernel)), kernel)  # on the 4-bit grid
    assert len(np.unique(kernel[:, 0])) <= 16
    assert any(isinstance(layer, KerasActivationQuantizationHolder) for layer in q.layers)
    q.save(tmp_path / "gptq.keras")
    np.testing.assert_array_equal(numpy(mct.keras_load_quantized_model(tmp_path / "gptq.keras")(X[:8])), numpy(q(X[:8])))


def test_gptq_changes_the_rounding_and_none_config_is_ptq():
    model = _net()
    ptq, _ = mct.ptq.keras_post_training_quantization(model, gen(), core_config=CORE)
    only_ptq, info = GPTQ(model, gen(), None, core_config=CORE)
    np.testing.assert_array_equal(numpy(only_ptq(X[:8])), numpy(ptq(X[:8])))
    q, _ = GPTQ(model, gen(), mct.gptq.get_keras_gptq_config(n_epochs=10), core_config=CORE)
    changed = [name for name in ("quant_c1_bn", "quant_dw", "quant_pw", "quant_fc")
               if not np.array_equal(numpy(q.get_layer(name).layer.kernel), numpy(ptq.get_layer(name).layer.kernel))]
    assert changed  # some weights round the other way


def test_bad_input():
    with pytest.raises(InvalidConfigError, match="GradientPTQConfig"):
        GPTQ(_net(), gen(), {"n_epochs": 1})
    with pytest.raises(ValueError, match="shape|size"):  # one image size: the model was captured at 12 x 12
        GPTQ(_net(), gen(), mct.gptq.get_keras_gptq_config(n_epochs=1), core_config=CORE,
             gptq_representative_data_gen=lambda: iter([[X[:16]], [X[16:20, :10, :10]]]))
    with pytest.raises(InvalidConfigError, match="gptq_representative_data_gen"):
        GPTQ(_net(), gen(), mct.gptq.get_keras_gptq_config(n_epochs=1), gptq_representative_data_gen=[X])


def test_default_adam_steps_as_torch_adam():
    """Keras GPTQ's default optimizers step as torch.optim.Adam (epsilon on the bias-corrected root): over a
    few steps on gradients spanning 1e-9 to 1, the values equal torch's formula's, where Keras' Adam differs."""
    from hwquant.keras.trainable.optimizers import TorchAdam

    rng = np.random.default_rng(0)
    grads = [(rng.standard_normal(64) * 10.0 ** rng.uniform(-9, 0, 64)).astype(np.float32) for _ in range(5)]
    start = rng.standard_normal(64).astype(np.float32)
    lr, b1, b2, eps = 3e-2, 0.9, 0.999, 1e-8
    p, m, v = start.astype(np.float64), np.zeros(64), np.zeros(64)
    for t, g in enumerate(grads, 1):  # torch.optim.Adam's update, in float64
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g.astype(np.float64) ** 2
        p = p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
    found = {}
    for cls in (TorchAdam, keras.optimizers.Adam):
        variable = keras.Variable(start)
        optimizer = cls(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps)
        for g in grads:
            optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), variable)])
        found[cls] = numpy(variable)
    np.testing.assert_allclose(found[TorchAdam], p, rtol=1e-5, atol=1e-6)
    assert np.abs(found[keras.optimizers.Adam] - p).max() > 1e-3  # (Keras' own Adam: another step for small gradients)
    cfg = mct.gptq.get_keras_gptq_config(1)
    assert type(cfg.optimizer) is TorchAdam and type(cfg.optimizer_rest) is TorchAdam
