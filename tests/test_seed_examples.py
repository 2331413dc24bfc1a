"""The seed documents' examples, run as user code would run them after `import hwquant as mct`
(module paths `model_compression_toolkit.X` become `hwquant.X`)."""
import math
import textwrap

import hwquant as mct


def run(code: str) -> dict:
    scope: dict = {}
    exec(textwrap.dedent(code), scope)  # noqa: S102 - the examples are fixed text
    return scope


def test_seed_000_target_platform_capabilities_names():
    tpc_mod = mct.target_platform_capabilities
    for name in ("QuantizationMethod", "Signedness", "AttributeQuantizationConfig", "OpQuantizationConfig",
                 "QuantizationConfigOptions", "TargetPlatformCapabilities", "OperatorsSet", "Fusing",
                 "OperatorSetGroup", "OperatorSetNames"):
        assert hasattr(tpc_mod, name), name
        assert hasattr(tpc_mod.schema.mct_current_schema, name) or name == "QuantizationMethod" or name == "Signedness"
    cfg = tpc_mod.schema.mct_current_schema.OpQuantizationConfig(
        default_weight_attr_config=tpc_mod.AttributeQuantizationConfig(),
        attr_weights_configs_mapping={}, activation_quantization_method=tpc_mod.QuantizationMethod.POWER_OF_TWO,
        activation_n_bits=8, supported_input_activation_n_bits=8, enable_activation_quantization=True,
        quantization_preserving=False, fixed_scale=None, fixed_zero_point=None, simd_size=32,
        signedness=tpc_mod.Signedness.AUTO)
    assert cfg.supported_input_activation_n_bits == (8,)
    assert mct.get_target_platform_capabilities().SCHEMA_VERSION == tpc_mod.SCHEMA_VERSION


def test_seed_001_target_platform_names():
    for name in ("QuantizationMethod", "OpQuantizationConfig", "AttributeQuantizationConfig",
                 "QuantizationConfigOptions", "TargetPlatformModel", "OperatorsSet", "Fusing", "OperatorSetConcat",
                 "OperationsToLayers", "OperationsSetToLayers", "LayerFilterParams", "TargetPlatformCapabilities"):
        assert hasattr(mct.target_platform, name), name


def test_seed_002_trainable_quantizer_configs():
    scope = run("""
        import hwquant as mct
        from hwquant.target_platform_capabilities.target_platform import QuantizationMethod
        from hwquant.constants import THRESHOLD, MIN_THRESHOLD

        w = mct.trainable_infrastructure.TrainableQuantizerWeightsConfig(
            weights_quantization_method=QuantizationMethod.SYMMETRIC,
            weights_n_bits=8,
            weights_quantization_params={THRESHOLD: 2.0},
            enable_weights_quantization=True,
            weights_channels_axis=3,
            weights_per_channel_threshold=True,
            min_threshold=MIN_THRESHOLD)

        # (the seed writes `activation_quantization_params=={...}`, a typo for `=`)
        a = mct.trainable_infrastructure.TrainableQuantizerActivationConfig(
            activation_quantization_method=QuantizationMethod.UNIFORM,
            activation_n_bits=8,
            activation_quantization_params={THRESHOLD: 2.0},
            enable_activation_quantization=True,
            min_threshold=MIN_THRESHOLD)
    """)
    assert scope["w"].weights_channels_axis == 3 and scope["a"].activation_n_bits == 8


def test_seed_003_framework_info():
    scope = run("""
        import hwquant as mct
        from hwquant import DefaultDict, FrameworkInfo

        class Conv2D: ...        # stand-ins for tf.keras.layers.*
        class ReLU: ...
        class Reshape: ...
        class Softmax: ...

        kernel_ops = [Conv2D]
        kernel_channels_mapping = DefaultDict({Conv2D: (3, 2)})
        f1 = FrameworkInfo(kernel_ops, [], [], kernel_channels_mapping, {}, {})
        activation_ops = [ReLU]
        f2 = FrameworkInfo(kernel_ops, activation_ops, [], kernel_channels_mapping, {}, {})
        no_quantization_ops = [Reshape]
        f3 = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, kernel_channels_mapping, {}, {})
        activation_min_max_mapping = {'softmax': (0, 1)}
        f4 = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, kernel_channels_mapping,
                           activation_min_max_mapping, {})
        layer_min_max_mapping = {Softmax: (0, 1)}
        f5 = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, kernel_channels_mapping,
                           activation_min_max_mapping, layer_min_max_mapping)
    """)
    assert scope["f1"].get_kernel_channels(scope["Conv2D"]) == (3, 2)
    assert scope["f2"].is_activation_op(scope["ReLU"]) and scope["f3"].is_no_quantization_op(scope["Reshape"])
    assert scope["f4"].get_activation_min_max("softmax") == (0, 1)
    assert scope["f5"].get_layer_min_max(scope["Softmax"]) == (0, 1)


def test_seed_003_framework_info_with_keras_layers():
    """The same examples with Keras 3's own layers (tf.keras.layers.X is keras.layers.X there), and the
    kernel channels of the first read back by the Keras adapter for a captured Conv2D."""
    import numpy as np
    import pytest

    keras = pytest.importorskip("keras")
    scope = run("""
        import keras
        from hwquant import DefaultDict, FrameworkInfo

        kernel_ops = [keras.layers.Conv2D]
        kernel_channels_mapping = DefaultDict({keras.layers.Conv2D: (3, 2)})
        f1 = FrameworkInfo(kernel_ops, [], [], kernel_channels_mapping, {}, {})
        activation_ops = [keras.layers.ReLU]
        no_quantization_ops = [keras.layers.Reshape]
        activation_min_max_mapping = {'softmax': (0, 1)}
        layer_min_max_mapping = {keras.layers.Softmax: (0, 1)}
        f5 = FrameworkInfo(kernel_ops, activation_ops, no_quantization_ops, kernel_channels_mapping,
                           activation_min_max_mapping, layer_min_max_mapping)
    """)
    from hwquant.keras.adapter import KerasAdapter
    from hwquant.keras.capture import capture

    f1, f5 = scope["f1"], scope["f5"]
    assert f5.is_kernel_op(keras.layers.Conv2D) and f5.is_activation_op(keras.layers.ReLU)
    assert f5.is_no_quantization_op(keras.layers.Reshape) and f5.get_layer_min_max(keras.layers.Softmax) == (0, 1)
    x = keras.Input((8, 8, 3))
    model = keras.Model(x, keras.layers.Conv2D(4, 3, name="c")(x))
    graph = capture(model, [np.zeros((1, 8, 8, 3), np.float32)])
    assert KerasAdapter(graph, fw_info=f1).kernel_axes(graph.node("c")) == (3, 2)


def test_seed_004_quantization_config():
    scope = run("""
        import hwquant as mct
        from hwquant import QuantizationConfig, ThresholdSelectionMethod, QuantizationMethod

        qc = QuantizationConfig(activation_n_bits=6, weights_n_bits=7,
                                activation_quantization_method=QuantizationMethod.SYMMETRIC_UNIFORM,
                                weights_quantization_method=QuantizationMethod.SYMMETRIC_UNIFORM,
                                weights_threshold_method=ThresholdSelectionMethod.MSE,
                                activation_threshold_method=ThresholdSelectionMethod.NOCLIPPING,
                                relu_unbound_correction=True, weights_bias_correction=True,
                                weights_per_channel_threshold=True)
    """)
    qc = scope["qc"]
    assert qc.activation_error_method == mct.QuantizationErrorMethod.NOCLIPPING
    assert qc.relu_bound_to_power_of_2 and qc.z_threshold == math.inf
    assert qc.tpc_overrides() == {"activation_quantization_method": mct.QuantizationMethod.SYMMETRIC,
                                  "weights_quantization_method": mct.QuantizationMethod.SYMMETRIC,
                                  "activation_n_bits": 6, "weights_n_bits": 7,
                                  "weights_per_channel_threshold": True}
    default = mct.QuantizationConfig()
    for method in ("NOCLIPPING", "MSE", "MAE", "KL", "LP"):
        assert hasattr(mct.ThresholdSelectionMethod, method)
    assert default.shift_negative_ratio == 0.05 and default.shift_negative_activation_correction
