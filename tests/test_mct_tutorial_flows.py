"""MCT's PyTorch tutorial flows, run as the tutorials run them, on a torchvision-layout MobileNetV2
(benchmarks.models: torchvision's module names, so the quantized model's names are the tutorials'),
reading the quantized model back the way the tutorials (and MCT's tests of the same features) do."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mct_quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper, get_ort_session_options
from mct_quantizers.pytorch.quantizers import BasePyTorchInferableQuantizer, WeightsPOTInferableQuantizer
from torch import nn

import hwquant as mct

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.models import MobileNetV2  # noqa: E402

QEM = mct.core.QuantizationErrorMethod


@pytest.fixture(scope="module")
def float_model():
    """MobileNetV2 (a third of the width, random batch-norm statistics: the names are what matter)."""
    torch.manual_seed(0)
    model = MobileNetV2(num_classes=10, width_mult=0.35).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


@pytest.fixture(scope="module")
def batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(8, 3, 64, 64, generator=g) for _ in range(2)]


@pytest.fixture(scope="module")
def representative_data_gen(batches):
    def gen():
        for b in batches:
            yield [b]
    return gen


def _ptq(model, gen, **kw):
    tpc = kw.pop("target_platform_capabilities", mct.get_target_platform_capabilities("pytorch", "default"))
    return mct.ptq.pytorch_post_training_quantization(in_module=model, representative_data_gen=gen,
                                                      target_platform_capabilities=tpc, **kw)


@pytest.fixture(scope="module")
def mse_model(float_model, representative_data_gen):
    cc = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(activation_error_method=QEM.MSE))
    return _ptq(float_model, representative_data_gen, core_config=cc)[0]


def _float_output(model, name, batches):
    """What the tutorials' get_layer_output hook collects: the float layer's outputs on the data."""
    outs = []
    handle = dict(model.named_modules())[name].register_forward_hook(lambda m, i, o: outs.append(o.detach()))
    with torch.no_grad():
        for b in batches:
            model(b)
    handle.remove()
    return torch.cat(outs)


def _holders(q):
    return {n: m for n, m in q.named_modules() if isinstance(m, PytorchActivationQuantizationHolder)}


def test_activation_threshold_search(float_model, representative_data_gen, batches, mse_model):
    """example_pytorch_activation_threshold_search: MSE vs NOCLIPPING thresholds of the first ReLU6
    and of the first projection (BN folded) read from the holders by name."""
    cc = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(activation_error_method=QEM.NOCLIPPING))
    noclip_model, quantization_info = _ptq(float_model, representative_data_gen, core_config=cc)
    for holder, float_name in (("features_0_2", "features.0.2"), ("features_1_conv_1_bn", "features.1.conv.2"),
                               ("features_2_conv_2_bn", "features.2.conv.3")):
        mse = getattr(mse_model, f"{holder}_activation_holder_quantizer").activation_holder_quantizer.threshold_np
        noclip = getattr(noclip_model, f"{holder}_activation_holder_quantizer").activation_holder_quantizer.threshold_np
        peak = float(_float_output(float_model, float_name, batches).abs().max())
        # no clipping: the smallest power of two above the peak; MSE may clip (never above it)
        assert float(noclip) == 2.0 ** math.ceil(math.log2(peak)), holder
        assert float(mse) <= float(noclip) and math.log2(float(mse)).is_integer()
    # the appendix: the folded layer is a wrapper, the ReLU6 modules stay in the model
    assert isinstance(mse_model.features_0_0_bn, PytorchQuantizationWrapper)
    assert any(isinstance(m, nn.ReLU6) for m in mse_model.modules())
    assert str(quantization_info)  # the mnist tutorial prints it


def test_z_score_outlier_removal(float_model, representative_data_gen, batches, mse_model):
    """example_pytorch_activation_z_score_threshold: thresholds with z_threshold=3 against none,
    read by holder name and by a loop over the modules (try/except, as the tutorial's appendix)."""
    cc = mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(z_threshold=3))
    z3 = _ptq(float_model, representative_data_gen, core_config=cc)[0]
    t3 = float(z3.features_6_conv_0_2_activation_holder_quantizer.activation_holder_quantizer.threshold_np)
    t_inf = float(mse_model.features_6_conv_0_2_activation_holder_quantizer.activation_holder_quantizer.threshold_np)
    x = _float_output(float_model, "features.6.conv.0.2", batches)
    z_bound = float(x.mean() + 3 * x.std())  # the tutorial's hand-computed z-score threshold
    assert t3 <= t_inf and t3 <= 2.0 ** math.ceil(math.log2(z_bound))
    thresholds = {}
    for i, module in enumerate(z3.modules()):
        try:
            thresholds[i] = module.activation_holder_quantizer.threshold_np
        except AttributeError:
            pass
    assert len(thresholds) == len(_holders(z3))
    assert isinstance(z3.features_7_conv_1_0_bn.layer, nn.Conv2d) and z3.features_7_conv_1_0_bn.layer.groups > 1


def test_manual_bit_widths_with_holder_lookups(float_model, representative_data_gen):
    """BitWidthConfig by node name (the IMX500 export flows'): a 16-bit activation and a 4-bit kernel,
    checked on the holders and wrappers by name; everything else keeps the TPC's 8 bits."""
    bit_cfg = mct.core.BitWidthConfig()
    bit_cfg.set_manual_activation_bit_width([mct.core.network_editor.NodeNameFilter("features_1_conv_1_bn")], 16)
    bit_cfg.set_manual_weights_bit_width([mct.core.network_editor.NodeNameFilter("features_0_0_bn")], 4, "weight")
    cc = mct.core.CoreConfig(bit_width_config=bit_cfg)
    q, _ = _ptq(float_model, representative_data_gen, core_config=cc,
                target_platform_capabilities=mct.get_target_platform_capabilities("4.0", "imx500"))
    assert q.features_1_conv_1_bn_activation_holder_quantizer.activation_holder_quantizer.num_bits == 16
    assert {n: h.activation_holder_quantizer.num_bits for n, h in _holders(q).items()
            if h.activation_holder_quantizer.num_bits != 8} == {"features_1_conv_1_bn_activation_holder_quantizer": 16}
    assert q.features_0_0_bn.weights_quantizers["weight"].num_bits == 4
    assert q.features_1_conv_1_bn.weights_quantizers["weight"].num_bits == 8


def test_network_editor(float_model, representative_data_gen):
    """Edit rules in DebugConfig: every convolution's kernel to 4 bits; one layer's kernel power-of-two."""
    ne = mct.core.network_editor
    rules = [ne.EditRule(filter=ne.NodeTypeFilter(nn.Conv2d),
                         action=ne.ChangeCandidatesWeightsQuantConfigAttr(attr_name="weight", weights_n_bits=4)),
             ne.EditRule(filter=ne.NodeNameFilter("features_0_0_bn"),
                         action=ne.ChangeFinalWeightsQuantizationMethod("weight", mct.QuantizationMethod.POWER_OF_TWO))]
    cc = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=rules))
    q, _ = _ptq(float_model, representative_data_gen, core_config=cc)
    wrappers = {n: m for n, m in q.named_modules() if isinstance(m, PytorchQuantizationWrapper)}
    convs = {n: w for n, w in wrappers.items() if isinstance(w.layer, nn.Conv2d)}
    assert convs and all(w.weights_quantizers["weight"].num_bits == 4 for w in convs.values())
    assert q.classifier_1.weights_quantizers["weight"].num_bits == 8  # the Linear is no Conv2d
    assert isinstance(q.features_0_0_bn.weights_quantizers["weight"], WeightsPOTInferableQuantizer)
    assert not isinstance(q.features_1_conv_1_bn.weights_quantizers["weight"], WeightsPOTInferableQuantizer)


def test_tpc_customisation(float_model, representative_data_gen):
    """A TPC built by hand from a shipped one: 6-bit default options (IMX500 1.0's activation operator
    sets, ReLU6 among them, take the default), the other operator sets and the fusing kept."""
    import hwquant.target_platform_capabilities.schema.mct_current_schema as schema  # MCT's import
    base = mct.get_target_platform_capabilities("1.0", "imx500")
    six_bit = base.default_qco.base_config.clone_and_edit(activation_n_bits=6)
    tpc = schema.TargetPlatformCapabilities(
        default_qco=schema.QuantizationConfigOptions(quantization_configurations=(six_bit,)),
        operator_set=base.operator_set,
        fusing_patterns=base.fusing_patterns, tpc_minor_version=1, tpc_patch_version=0,
        tpc_platform_type="custom", add_metadata=False, name="six_bit_tpc")
    q, _ = _ptq(float_model, representative_data_gen, target_platform_capabilities=tpc)
    assert q.features_0_2_activation_holder_quantizer.activation_holder_quantizer.num_bits == 6
    assert q.features_1_conv_1_bn_activation_holder_quantizer.activation_holder_quantizer.num_bits == 8  # Conv set


def test_mixed_precision(float_model, representative_data_gen):
    """example_pytorch_mixed_precision_ptq: 75 % of the weights memory, configuration passed positionally."""
    configuration = mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(
        num_of_images=16, use_hessian_based_scores=False))
    tpc = mct.get_target_platform_capabilities("pytorch", "default")
    ru_data = mct.core.pytorch_resource_utilization_data(float_model, representative_data_gen, configuration,
                                                         target_platform_capabilities=tpc)
    target = mct.core.ResourceUtilization(ru_data.weights_memory * 0.75)
    q, info = mct.ptq.pytorch_post_training_quantization(float_model, representative_data_gen,
                                                         target_resource_utilization=target, core_config=configuration,
                                                         target_platform_capabilities=tpc)
    kernels = [w for w in q.modules() if isinstance(w, PytorchQuantizationWrapper)]
    used = sum(w.float_weight("weight").numel() * w.weights_quantizers["weight"].num_bits / 8 for w in kernels)
    assert used <= ru_data.weights_memory * 0.75 and info.final_resource_utilization.weights_memory == used


def test_qat_init_train_finalize(float_model, representative_data_gen, batches):
    """QAT as MCT's facade docstring shows it; finalize leaves inferable quantizers in every wrapper and
    holder among the model's children (what MCT's finalize walks)."""
    qat_model, _ = mct.qat.pytorch_quantization_aware_training_init_experimental(
        float_model, representative_data_gen, core_config=mct.core.CoreConfig())
    opt = torch.optim.Adam([p for p in qat_model.parameters() if p.requires_grad], lr=1e-4)
    labels = torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(0))
    for b in batches:
        loss = nn.functional.cross_entropy(qat_model(b), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = mct.qat.pytorch_quantization_aware_training_finalize_experimental(qat_model)
    layers = [m for _, m in final.named_children() if isinstance(m, (PytorchQuantizationWrapper,
                                                                      PytorchActivationQuantizationHolder))]
    assert layers
    for layer in layers:
        quantizers = (layer.weights_quantizers.values() if isinstance(layer, PytorchQuantizationWrapper)
                      else [layer.activation_holder_quantizer])
        assert all(isinstance(k, BasePyTorchInferableQuantizer) for k in quantizers)


def test_export_and_onnx_runtime_inference(mse_model, representative_data_gen, batches, tmp_path):
    """example_pytorch_export: MCTQ (default and opset 16), fake-quant ONNX and TorchScript; ONNX Runtime
    with mct-quantizers' session options, input / output names read from the session."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime_extensions")
    x = batches[0].numpy()
    with torch.no_grad():
        ref = mse_model(batches[0]).numpy()
    step = mse_model.classifier_1_activation_holder_quantizer.activation_holder_quantizer.scale.item()
    for name, kw in (("mctq.onnx", {}), ("mctq16.onnx", {"onnx_opset_version": 16}),
                     ("fq.onnx", {"quantization_format": mct.exporter.QuantizationFormat.FAKELY_QUANT})):
        path = tmp_path / name
        mct.exporter.pytorch_export_model(model=mse_model, save_model_path=str(path),
                                          repr_dataset=representative_data_gen, **kw)
        sess = ort.InferenceSession(str(path), get_ort_session_options(), providers=["CPUExecutionProvider"])
        input_name, output_name = sess.get_inputs()[0].name, sess.get_outputs()[0].name
        out = sess.run([output_name], {input_name: x.astype(np.float32)})[0]
        assert np.abs(out - ref).max() <= step * 1.0001, name
    mct.exporter.pytorch_export_model(
        model=mse_model, save_model_path=str(tmp_path / "fq.pt"), repr_dataset=representative_data_gen,
        serialization_format=mct.exporter.PytorchExportSerializationFormat.TORCHSCRIPT,
        quantization_format=mct.exporter.QuantizationFormat.FAKELY_QUANT)
    loaded = torch.jit.load(str(tmp_path / "fq.pt"))
    with torch.no_grad():
        assert torch.equal(loaded(batches[0]), mse_model(batches[0]))


def test_structured_pruning_then_ptq(float_model, representative_data_gen, batches, tmp_path):
    """MCT's pruning flow (its facade's documented example): half the float32 weights memory, one score
    approximation, the pruned float model exported as the structured-pruning tutorial does (a float ONNX
    file), then PTQ of the pruned model."""
    dense_nparams = sum(p.numel() for p in float_model.parameters())
    target_resource_utilization = mct.core.ResourceUtilization(weights_memory=dense_nparams * 4 * 0.5)
    pruning_config = mct.pruning.PruningConfig(num_score_approximations=1)
    pruned_model, pruning_info = mct.pruning.pytorch_pruning_experimental(
        model=float_model, target_resource_utilization=target_resource_utilization,
        representative_data_gen=representative_data_gen, pruning_config=pruning_config)
    pruned_nparams = sum(p.numel() for p in pruned_model.parameters())
    assert pruned_nparams * 4 <= pruning_info.weights_memory_after <= dense_nparams * 4 * 0.5
    for node, mask in pruning_info.pruning_masks.items():  # MCT's keys are nodes: their .name works too
        assert node.name in pruning_info.importance_scores and len(mask) == len(pruning_info.importance_scores[node])
    assert any(m.sum() < len(m) for m in pruning_info.pruning_masks.values())
    with torch.no_grad():
        assert pruned_model(batches[0]).shape == float_model(batches[0]).shape
    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "qmodel.onnx"
    mct.exporter.pytorch_export_model(pruned_model, save_model_path=str(path), repr_dataset=representative_data_gen)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: batches[0].numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(out, pruned_model(batches[0]).numpy(), rtol=1e-4, atol=1e-4)
    quantized, _ = _ptq(pruned_model, representative_data_gen)
    with torch.no_grad():
        assert torch.isfinite(quantized(batches[0])).all()


def test_data_generation_then_ptq(float_model):
    """MCT's data-generation flow: a configuration, images generated from the float model alone, those images as
    the representative dataset of PTQ (a few iterations: the flow, not the images' quality, is checked here)."""
    data_gen_config = mct.data_generation.get_pytorch_data_generation_config(
        n_iter=3, data_gen_batch_size=4, extra_pixels=8)
    generated_images = mct.data_generation.pytorch_data_generation_experimental(
        model=float_model, n_images=8, output_image_size=64, data_generation_config=data_gen_config)
    assert len(generated_images) == 8 and tuple(generated_images[0].shape) == (1, 3, 64, 64)

    def representative_dataset_gen():
        for i in range(0, len(generated_images), 4):
            yield [torch.cat(generated_images[i:i + 4])]

    quantized, _ = _ptq(float_model, representative_dataset_gen)
    with torch.no_grad():
        assert torch.isfinite(quantized(torch.cat(generated_images[:2]))).all()
