"""The shipped TPCs attach to Keras 3 layers and raw operations."""
import pytest

keras = pytest.importorskip("keras")
from keras import layers  # noqa: E402

import hwquant as mct  # noqa: E402
from hwquant.errors import InvalidTPCError  # noqa: E402
from hwquant.keras.attach import attach_tpc  # noqa: E402
from hwquant.keras.capture import capture  # noqa: E402


@pytest.mark.parametrize("version, device", [("1.0", "imx500"), ("4.0", "imx500"), ("5.0", "imx500"), ("6.0", "imx500"),
                                             ("1.0", "tflite"), ("1.0", "qnnpack")])
def test_every_shipped_tpc_attaches(version, device):
    assert attach_tpc(mct.get_target_platform_capabilities(version, device)).tpc.name


def test_layers_and_captured_nodes_find_their_operator_sets():
    import numpy as np
    x = keras.Input((8, 8, 3))
    y = layers.Conv2D(4, 3, activation="relu", name="c")(x)
    y = layers.DepthwiseConv2D(3, name="dw")(y)
    y = layers.ReLU(6.0, name="r6")(y)
    y = keras.ops.add(y, y)
    model = keras.Model(x, layers.Dense(2, name="fc")(layers.Flatten(name="f")(y)))
    fqc = attach_tpc(mct.get_target_platform_capabilities("4.0"))
    graph = capture(model, [np.zeros((1, 8, 8, 3), "float32")])
    opsets = [fqc.opset_of(n.type, n.framework_attr) for n in graph]  # input, c, c_activation, dw, r6, add, f, fc
    assert opsets == [None, "Conv", "ReLU", "DepthwiseConv2D", "ReLU6", "Add", "Flatten", "FullyConnected"]
    # Keras' weight names: the kernel options are read under them
    dw = fqc.get_qco(layers.DepthwiseConv2D, {}).base_config.attr_weights_configs_mapping
    assert set(dw) == {"kernel", "bias"}
    schema = mct.target_platform_capabilities.schema.mct_current_schema
    custom = schema.TargetPlatformCapabilities(default_qco=mct.get_target_platform_capabilities().default_qco,
                                               operator_set=(schema.OperatorsSet(name="MyOp"),), tpc_platform_type="x")
    with pytest.raises(InvalidTPCError, match="'MyOp' .* not a keras operator set .*custom_tpc_opset_to_layer"):
        attach_tpc(custom)
