"""The quantized Keras model read the way MCT's Keras tutorials and tests read it (issue 29, item 6):
mct-quantizers' quantizer configs, the wrapper's get_weights_vars / set_quantize_weights, the holder's
and wrapper's convert_to_inferable_quantizers, `mct_quantizers.keras_load_quantized_model`, and MCT's
module paths (through hwquant.mct_alias, as MCT code imports them). Torch backend in the suite; again
on TensorFlow in scripts/test_keras_tensorflow.sh."""
import importlib

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

import hwquant as mct  # noqa: E402
import hwquant.mct_alias as mct_alias  # noqa: E402
from hwquant.keras import quantizers as kq  # noqa: E402
from hwquant.keras.quantizers import (KerasActivationQuantizationHolder, KerasInferableQuantizer,  # noqa: E402
                                      KerasQuantizationWrapper, make_quantizer)
from hwquant.tpc.enums import QuantizationMethod as QM  # noqa: E402

# mct-quantizers 1.7's get_config() keys of each Keras class (read from its source)
MCTQ_KEYS = {
    "ActivationPOTInferableQuantizer": {"num_bits", "signed", "threshold"},
    "ActivationSymmetricInferableQuantizer": {"num_bits", "signed", "threshold"},
    "ActivationUniformInferableQuantizer": {"num_bits", "min_range", "max_range"},
    "WeightsPOTInferableQuantizer": {"num_bits", "threshold", "per_channel", "channel_axis", "input_rank"},
    "WeightsSymmetricInferableQuantizer": {"num_bits", "threshold", "per_channel", "channel_axis", "input_rank"},
    "WeightsUniformInferableQuantizer": {"num_bits", "min_range", "max_range", "per_channel", "channel_axis",
                                         "input_rank"},
    "WeightsLUTPOTInferableQuantizer": {"num_bits", "lut_values", "threshold", "per_channel", "channel_axis",
                                        "input_rank", "lut_values_bitwidth", "eps"},
    "WeightsLUTSymmetricInferableQuantizer": {"num_bits", "lut_values", "threshold", "per_channel", "channel_axis",
                                              "input_rank", "lut_values_bitwidth", "eps"},
}


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _net():
    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3), name="img")
    y = layers.Conv2D(8, 3, padding="same", activation="relu", name="c1")(x)
    y = layers.DepthwiseConv2D(3, padding="same", name="dw")(y)
    y = layers.ReLU(name="r2")(y)
    y = layers.GlobalAveragePooling2D(name="gap")(y)
    return keras.Model(x, layers.Dense(5, name="fc")(y), name="tiny")


BATCHES = [np.random.default_rng(i).normal(size=(8, 12, 12, 3)).astype("float32") for i in range(3)]


def _data():
    return iter([[b] for b in BATCHES])


@pytest.fixture(scope="module")
def quantized():
    return mct.ptq.keras_post_training_quantization(_net(), _data)[0]


@pytest.fixture
def alias():
    mct_alias.enable()
    yield importlib.import_module(mct_alias.ALIAS)
    mct_alias.disable()


def _holders(model):
    return [layer for layer in model.layers if isinstance(layer, KerasActivationQuantizationHolder)]


def _wrappers(model):
    return [layer for layer in model.layers if isinstance(layer, KerasQuantizationWrapper)]


# ------------------------------------------------------------------ quantizer configs
def test_quantizer_configs_hold_mct_quantizers_keys_as_tutorials_read_them(quantized):
    for holder in _holders(quantized):
        q = holder.activation_holder_quantizer
        config = q.get_config()
        assert set(config) == MCTQ_KEYS[type(q).__name__]
        threshold = config["threshold"]  # MCT's tests: per tensor, a list of one
        assert len(threshold) == 1 and threshold[0] == float(q.threshold_np[0])
        assert np.log2(threshold[0]).is_integer() and config["num_bits"] == 8
    relu = quantized.get_layer("r2_activation_holder_quantizer").activation_holder_quantizer.get_config()
    assert relu["signed"] is False
    for wrapper in _wrappers(quantized):
        q = wrapper.weights_quantizers["kernel"]
        config = q.get_config()
        assert set(config) == MCTQ_KEYS[type(q).__name__]
        kernel = wrapper.layer.kernel
        assert config["input_rank"] == len(kernel.shape) and config["per_channel"]
        assert len(config["threshold"]) == kernel.shape[config["channel_axis"]]


@pytest.mark.parametrize("method, bits, params, axis, target", [
    (QM.POWER_OF_TWO, 8, {"threshold": 4.0, "is_signed": True}, None, "activation"),
    (QM.SYMMETRIC, 6, {"threshold": 3.0, "is_signed": False}, None, "activation"),
    (QM.UNIFORM, 8, {"range_min": -1.3, "range_max": 2.2}, None, "activation"),
    (QM.SYMMETRIC, 4, {"threshold": np.array([1.0, 2.0, 0.5, 3.0, 0.25])}, 3, "weights"),
    (QM.POWER_OF_TWO, 8, {"threshold": 0.7}, None, "weights"),
    (QM.SYMMETRIC, 8, {"threshold": 0.7, "is_signed": False}, None, "weights"),
    (QM.UNIFORM, 5, {"range_min": np.array([-1.0, -0.5, -2, -0.1, 0.2]), "range_max": np.array([1, 2, 0.5, 0.3, 1.0])},
     3, "weights"),
    (QM.LUT_POT_QUANTIZER, 3, {"lut_values": np.array([-128, -60, -20, -4, 0, 4, 20, 127]), "threshold": 2.0},
     None, "weights"),
    (QM.LUT_SYM_QUANTIZER, 3, {"lut_values": np.array([-8, -3, 0, 2, 7]), "threshold": np.array([1.0, 3, 0.5, 2, 0.3]),
                               "lut_values_bitwidth": 4}, 3, "weights"),
])
def test_mct_config_round_trips_to_the_same_grid(method, bits, params, axis, target):
    q = make_quantizer(method, bits, params, channel_axis=axis, target=target)
    q.input_rank = 4 if target == "weights" else None
    config = keras.saving.serialize_keras_object(q)
    assert set(q.get_config()) - MCTQ_KEYS.get(type(q).__name__, set(q.get_config())) <= {"signed"}
    again = keras.saving.deserialize_keras_object(config)
    assert type(again) is type(q) and again.get_config() == q.get_config()
    x = (np.random.default_rng(1).normal(size=(4, 9, 7, 5)) * 2).astype("float32")
    np.testing.assert_array_equal(numpy(again(x)), numpy(q(x)))


def test_from_config_reads_the_keys_earlier_versions_saved():
    old = {"method": int(QM.POWER_OF_TWO), "num_bits": 8, "params": {"threshold": 2.0, "is_signed": False},
           "channel_axis": None, "target": "activation"}
    q = kq.ActivationPOTInferableQuantizer.from_config(old)
    assert q.get_config() == {"num_bits": 8, "signed": False, "threshold": [2.0]}
    # and a class built from mct-quantizers' keys alone, as MCT code writes them
    q = kq.WeightsSymmetricInferableQuantizer.from_config({"num_bits": 8, "threshold": [0.5, 1.0], "per_channel": True,
                                                           "channel_axis": 1, "input_rank": 2})
    assert q.channel_axis == 1 and q.threshold == [0.5, 1.0] and isinstance(q, KerasInferableQuantizer)
    with pytest.raises(ValueError, match="needs 'threshold'"):
        kq.ActivationPOTInferableQuantizer.from_config({"num_bits": 8, "signed": True})


# ------------------------------------------------------------------ the wrapper
def test_wrapper_weights_vars_and_set_quantize_weights(quantized):
    x = BATCHES[0]
    y0 = numpy(quantized(x))
    wrapper = quantized.get_layer("quant_c1")
    [(name, var, q)] = wrapper.get_weights_vars()
    assert name == "kernel" and var is wrapper.layer.kernel and q is wrapper.weights_quantizers["kernel"]
    kernel = numpy(wrapper.get_quantized_weights()["kernel"])
    np.testing.assert_array_equal(numpy(q(kernel)), kernel)  # the layer holds values on the grid
    try:
        wrapper.set_quantize_weights({"kernel": np.zeros_like(kernel)})
        assert np.abs(numpy(wrapper.layer.kernel)).max() == 0
        assert not np.array_equal(numpy(quantized(x)), y0)
        with pytest.raises(ValueError, match="shape"):
            wrapper.set_quantize_weights({"kernel": kernel[..., :2]})
        with pytest.raises(KeyError, match="bias"):
            wrapper.set_quantize_weights({"bias": np.zeros(8, "float32")})
    finally:
        wrapper.set_quantize_weights({"kernel": kernel})
    np.testing.assert_array_equal(numpy(quantized(x)), y0)


# ------------------------------------------------------------------ saving and loading
def test_saved_model_loads_with_mct_quantizers_loader(quantized, alias, tmp_path):
    import mct_quantizers

    path = mct.exporter.keras_export_model(quantized, tmp_path / "q.keras")
    loaded = mct_quantizers.keras_load_quantized_model(str(path), custom_objects=None, compile=True, options=None)
    also = mct.keras_load_quantized_model(path)
    x = BATCHES[1]
    for model in (loaded, also):
        np.testing.assert_array_equal(numpy(model(x)), numpy(quantized(x)))
        assert [h.activation_holder_quantizer.get_config() for h in _holders(model)] == \
            [h.activation_holder_quantizer.get_config() for h in _holders(quantized)]
        assert [w.weights_quantizers["kernel"].get_config() for w in _wrappers(model)] == \
            [w.weights_quantizers["kernel"].get_config() for w in _wrappers(quantized)]
    with pytest.raises(ValueError, match="options"):
        mct_quantizers.keras_load_quantized_model(str(path), options=object())


def test_the_alias_gives_mct_quantizers_loader_back(alias):
    import mct_quantizers

    assert mct_quantizers.keras_load_quantized_model is mct_alias.keras_load_quantized_model
    mct_alias.disable()
    assert mct_quantizers.keras_load_quantized_model is not mct_alias.keras_load_quantized_model
    mct_alias.enable()  # (the fixture disables it again)
    assert mct_quantizers.keras_load_quantized_model is mct_alias.keras_load_quantized_model


# ------------------------------------------------------------------ trainable layers turned inferable
def test_holder_and_wrapper_convert_their_trainable_quantizers_in_place():
    from hwquant.keras.trainable import BaseKerasTrainableQuantizer

    qat, _, _ = mct.qat.keras_quantization_aware_training_init_experimental(_net(), _data)
    qat.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
    qat.fit(BATCHES[0], np.zeros((8, 5), "float32"), epochs=1, batch_size=4, verbose=0)
    x = BATCHES[2]
    y_trained = numpy(qat(x, training=False))
    finalized = mct.qat.keras_quantization_aware_training_finalize_experimental(qat)
    new_layers = {}
    for layer in _holders(qat) + _wrappers(qat):
        new_layers[layer.name] = layer.convert_to_inferable_quantizers()
    quantizers = [h.activation_holder_quantizer for h in _holders(qat)] + \
        [q for w in _wrappers(qat) for q in w.weights_quantizers.values()]
    assert not any(isinstance(q, BaseKerasTrainableQuantizer) for q in quantizers)
    assert all(isinstance(q, KerasInferableQuantizer) for q in quantizers)
    # in place: the model computes what the trained model computed in inference, as the finalized one
    np.testing.assert_array_equal(numpy(qat(x, training=False)), y_trained)
    np.testing.assert_array_equal(numpy(finalized(x)), y_trained)
    for name, new in new_layers.items():  # the returned layers: inferable, without the trained variables
        old = finalized.get_layer(name)
        if isinstance(new, KerasQuantizationWrapper):
            assert new.weights_quantizers["kernel"].get_config() == old.weights_quantizers["kernel"].get_config()
            for a, b in zip(new.layer.weights, old.layer.weights):
                np.testing.assert_array_equal(numpy(a), numpy(b))
            assert len(new.weights) == len(old.weights)
        else:
            assert new.activation_holder_quantizer.get_config() == old.activation_holder_quantizer.get_config()
            assert not new.weights


# ------------------------------------------------------------------ MCT's module paths
def test_mct_module_paths_give_hwquants_classes(alias):
    from model_compression_toolkit.exporter.model_wrapper import get_exportable_keras_model, is_keras_layer_exportable
    from model_compression_toolkit.qat.keras.quantizer.base_keras_qat_weight_quantizer import \
        BaseKerasQATWeightTrainableQuantizer
    from model_compression_toolkit.qat.keras.quantizer.lsq.symmetric_lsq import LSQWeightQATQuantizer
    from model_compression_toolkit.qat.keras.quantizer.lsq.uniform_lsq import LSQUniformWeightQATQuantizer
    from model_compression_toolkit.qat.keras.quantizer.ste_rounding.symmetric_ste import STEWeightQATQuantizer
    from model_compression_toolkit.qat.keras.quantizer.ste_rounding.uniform_ste import STEUniformWeightQATQuantizer
    from model_compression_toolkit.target_platform_capabilities.constants import BIAS_ATTR, KERNEL_ATTR
    from model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers import (
        BaseKerasActivationTrainableQuantizer, LSQUniformActivationTrainableQuantizer)
    from model_compression_toolkit.trainable_infrastructure.keras.activation_quantizers.ste.symmetric_ste import \
        STESymmetricActivationTrainableQuantizer
    from model_compression_toolkit.trainable_infrastructure.keras.base_keras_quantizer import \
        BaseKerasTrainableQuantizer

    import hwquant.keras.gptq.quantizers as gq
    import hwquant.keras.trainable as kt
    mct_ = alias
    assert BaseKerasTrainableQuantizer is kt.BaseKerasTrainableQuantizer
    assert BaseKerasActivationTrainableQuantizer is kt.BaseKerasActivationTrainableQuantizer
    assert STESymmetricActivationTrainableQuantizer is kt.STESymmetricActivationTrainableQuantizer
    assert LSQUniformActivationTrainableQuantizer is kt.LSQUniformActivationTrainableQuantizer
    assert BaseKerasQATWeightTrainableQuantizer is kt.BaseKerasWeightTrainableQuantizer
    assert (STEWeightQATQuantizer, STEUniformWeightQATQuantizer, LSQWeightQATQuantizer, LSQUniformWeightQATQuantizer) \
        == (kt.STESymmetricWeightsTrainableQuantizer, kt.STEUniformWeightsTrainableQuantizer,
            kt.LSQSymmetricWeightsTrainableQuantizer, kt.LSQUniformWeightsTrainableQuantizer)
    assert (KERNEL_ATTR, BIAS_ATTR) == ("kernel_attr", "bias_attr")
    # the same names as attribute chains, as MCT's own modules reach them
    assert mct_.trainable_infrastructure.keras.activation_quantizers.lsq.symmetric_lsq \
        .LSQSymmetricActivationTrainableQuantizer is kt.LSQSymmetricActivationTrainableQuantizer
    assert mct_.trainable_infrastructure.KerasTrainableQuantizationWrapper is KerasQuantizationWrapper
    from model_compression_toolkit.gptq.keras.quantizer.soft_rounding.symmetric_soft_quantizer import \
        SymmetricSoftRoundingGPTQ
    from model_compression_toolkit.gptq.keras.quantizer.ste_rounding.symmetric_ste import STEWeightGPTQQuantizer
    assert SymmetricSoftRoundingGPTQ is gq.SymmetricSoftRoundingGPTQ and STEWeightGPTQQuantizer is gq.STESymmetricGPTQ
    assert mct_.exporter.model_wrapper.is_keras_layer_exportable is is_keras_layer_exportable
    assert mct_.target_platform_capabilities.constants.KERNEL_ATTR == "kernel_attr"
    assert callable(get_exportable_keras_model)


def test_exportable_model_and_layer_checks(quantized, alias):
    wrapper = alias.exporter.model_wrapper
    assert all(wrapper.is_keras_layer_exportable(layer) for layer in quantized.layers)
    model, info = wrapper.get_exportable_keras_model(quantized)
    assert model is quantized and info is not None
    qat, _, _ = mct.qat.keras_quantization_aware_training_init_experimental(_net(), _data)
    # a QAT model's quantizers are MCT's QAT quantizer classes, under their MCT names
    from model_compression_toolkit.qat.keras.quantizer.ste_rounding.symmetric_ste import STEWeightQATQuantizer
    assert all(isinstance(w.weights_quantizers["kernel"], STEWeightQATQuantizer) for w in _wrappers(qat))
    with pytest.raises(ValueError, match="finalize"):
        wrapper.get_exportable_keras_model(qat)
    with pytest.raises(ValueError, match="keras.Model"):
        wrapper.get_exportable_keras_model("graph")
