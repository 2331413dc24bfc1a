"""MCT 2.6 public names user code reaches for (issue 16, part 3)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hwquant as mct
from hwquant.tpc.schema import OperatorsSet, TargetPlatformCapabilities


def test_core_names():
    assert mct.core.DEFAULTCONFIG == mct.core.QuantizationConfig()
    assert (int(mct.core.ChannelAxis.NHWC), int(mct.core.ChannelAxis.NCHW)) == (-1, 1)
    assert mct.core.quantization_config.QuantizationConfig is mct.core.QuantizationConfig
    assert mct.core.quantization_config.CustomOpsetLayers is mct.core.CustomOpsetLayers
    mp = mct.core.mixed_precision_quantization_config
    assert mp.MixedPrecisionQuantizationConfig is mct.core.MixedPrecisionQuantizationConfig
    assert mp.MpDistanceWeighting is mct.core.MpDistanceWeighting


class Pooling(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.conv(x), 1)


def test_custom_opset_layers_attach_an_operator_set():
    base = mct.get_target_platform_capabilities()
    tpc = TargetPlatformCapabilities(default_qco=base.default_qco,
                                     operator_set=list(base.operator_set) + [OperatorsSet(name="MyPool")])
    qc = mct.core.QuantizationConfig(custom_tpc_opset_to_layer={
        "MyPool": mct.core.CustomOpsetLayers([F.adaptive_avg_pool2d])})
    data = lambda: iter([[torch.randn(4, 3, 8, 8)]])  # noqa: E731
    q, _ = mct.ptq.pytorch_post_training_quantization(Pooling().eval(), data, core_config=mct.core.CoreConfig(qc),
                                                      target_platform_capabilities=tpc)
    assert isinstance(q, nn.Module)


def test_tpc_io_handler_round_trip(tmp_path):
    io = mct.target_platform_capabilities.tpc_io_handler
    tpc = mct.get_target_platform_capabilities("4.0", "imx500")
    path = tmp_path / "tpc.json"
    io.export_target_platform_capabilities(tpc, path)
    assert io.load_target_platform_capabilities(str(path)) == tpc
    assert io.load_target_platform_capabilities(tpc) == tpc


def test_activation_trainable_base_class():
    base = mct.trainable_infrastructure.BasePytorchActivationTrainableQuantizer
    assert issubclass(base, mct.trainable_infrastructure.BasePytorchTrainableQuantizer)
    from hwquant.torch.trainable import quantizers
    assert issubclass(quantizers.STESymmetricActivationTrainableQuantizer, base)
    assert not issubclass(quantizers.STESymmetricWeightsTrainableQuantizer, base)


def test_debug_bypass_returns_the_model_before_any_check():
    model = nn.Linear(3, 2)
    cc = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(bypass=True))
    # not even the (missing) data is looked at
    assert mct.ptq.pytorch_post_training_quantization(model, None, core_config=cc) == (model, None)
    assert mct.gptq.pytorch_gradient_post_training_quantization(model, None, core_config=cc) == (model, None)


def test_attribute_filter_takes_an_op():
    import operator

    from hwquant.target_platform_capabilities import AttributeFilter, Eq, LayerFilterParams
    f = AttributeFilter("min_val", 0, operator.eq)
    assert f.op is operator.eq and f.match({"min_val": 0}) and not f.match({"min_val": 1}) and not f.match({})
    assert Eq("min_val", 0).op is operator.eq  # the named filters expose theirs
    both = LayerFilterParams(torch.nn.Hardtanh, f & AttributeFilter("max_val", 6, operator.le))
    assert both.match(torch.nn.Hardtanh, {"min_val": 0, "max_val": 6})
    with pytest.raises(ValueError, match="AttributeFilter needs op"):
        AttributeFilter("min_val", 0)
    with pytest.raises(ValueError, match="op must be a function"):
        AttributeFilter("min_val", 0, "==")


def test_current_schema_names_its_version_module():
    """MCT's mct_current_schema imports the current version's module as `schema`; code reaches the classes
    through it (`mct_current_schema.schema.TargetPlatformCapabilities`)."""
    import importlib

    current = mct.target_platform_capabilities.schema.mct_current_schema
    v2 = importlib.import_module("hwquant.target_platform_capabilities.schema.v2")
    assert current.schema is v2 and current.schema.SCHEMA_VERSION == 2
    for name in ("TargetPlatformCapabilities", "OperatorsSet", "OperatorSetGroup", "Fusing", "OpQuantizationConfig",
                 "QuantizationConfigOptions", "AttributeQuantizationConfig", "OperatorSetNames", "Signedness"):
        assert getattr(current.schema, name) is getattr(current, name), name
    assert current.schema.TargetPlatformCapabilities is TargetPlatformCapabilities
    base = mct.get_target_platform_capabilities()
    tpc = current.schema.TargetPlatformCapabilities(default_qco=base.default_qco, operator_set=list(base.operator_set))
    assert tpc.SCHEMA_VERSION == 2
    v1 = importlib.import_module("hwquant.target_platform_capabilities.schema.v1")
    assert all(hasattr(v1, name) for name in v1.__all__)  # (star imports of v1 still work)
