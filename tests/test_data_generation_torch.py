"""mct.data_generation's PyTorch path: images generated from a batch-norm model alone match its batch norms'
statistics better than their start, have the asked shape, and calibrate PTQ; every image granularity, layer
weighting and output loss; what was used and what it cost said in ``.report``; fallbacks and bad input."""
import logging

import numpy as np
import pytest
import torch
from torch import nn

import hwquant as mct
from hwquant.errors import InvalidConfigError
get_pytorch_data_generation_config = mct.data_generation.get_pytorch_data_generation_config
pytorch_data_generation_experimental = mct.data_generation.pytorch_data_generation_experimental


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                          nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()
    # statistics of images the generator never sees (a mean of 1.5, a spread of 0.5): reachable targets
    model.train()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # (a plain average over the batches)
    with torch.no_grad():
        for _ in range(4):
            model(1.5 + 0.5 * torch.randn(16, 1, 12, 12))
    return model.eval()


def _bn_gap(model, images):
    """Mean squared distance between the batch norms' input statistics on ``images`` and their stored ones."""
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append((m, i[0]))) for m in model.modules()
             if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        model(images)
    for h in hooks:
        h.remove()
    return float(np.mean([((x.mean((0, 2, 3)) - m.running_mean) ** 2).mean() for m, x in seen]))


def test_generated_images_match_the_batch_norms_and_calibrate():
    model = _model()
    config = get_pytorch_data_generation_config(n_iter=60, data_gen_batch_size=8, extra_pixels=2,
                                                image_normalization_type=mct.data_generation.ImageNormalizationType
                                                .NO_NORMALIZATION, image_clipping=False)
    images = pytorch_data_generation_experimental(model, 10, 12, config)
    assert len(images) == 10 and all(tuple(i.shape) == (1, 1, 12, 12) for i in images)
    generated = torch.cat(images)
    start = torch.randn_like(generated)
    assert _bn_gap(model, generated) < 0.2 * _bn_gap(model, start)
    quantized, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[generated]]))
    with torch.no_grad():
        assert quantized(generated).shape == (10, 4)
    # deterministic with a seed
    again = torch.cat(pytorch_data_generation_experimental(model, 10, 12, config))
    torch.testing.assert_close(again, generated)
    other = torch.cat(pytorch_data_generation_experimental(model, 10, 12, config, seed=1))
    assert not torch.allclose(other, generated)
    report = images.report
    assert report.batch_norm_layers == ["_1", "_4"] and report.ignored_batch_norm_layers == {}
    assert report.output_loss == "NEGATIVE_MIN_MAX_DIFF" and report.image_granularity == "AllImages"
    assert report.seconds_per_image > 0 and len(report.final_losses) == 2  # two batches (8 + 2)
    # the images and RAdam's two moments, per image: 1 x 14 x 14 floats, three times (and RAdam's step count)
    assert 3 * 4 * 14 * 14 <= report.held_bytes_per_image < 4 * 4 * 14 * 14


@pytest.mark.parametrize("granularity,weighting,loss", [
    ("ImageWise", "FIRST_LAYER_MULTIPLIER", "REGULARIZED_MIN_MAX_DIFF"),
    ("BatchWise", "GRAD", "INVERSE_MIN_MAX_DIFF"),
    ("AllImages", "AVERAGE", "NONE")])
def test_every_granularity_weighting_and_output_loss(granularity, weighting, loss):
    dg = mct.data_generation
    model = _model()
    config = get_pytorch_data_generation_config(
        n_iter=40, data_gen_batch_size=4, extra_pixels=2, image_granularity=dg.ImageGranularity[granularity],
        layer_weighting_type=dg.BNLayerWeightingType[weighting], output_loss_type=dg.OutputLossType[loss],
        image_normalization_type=dg.ImageNormalizationType.NO_NORMALIZATION, image_clipping=False)
    images = pytorch_data_generation_experimental(model, 10, 12, config)
    generated = torch.cat(images)
    assert generated.shape == (10, 1, 12, 12) and torch.isfinite(generated).all()
    assert _bn_gap(model, generated) < 0.3 * _bn_gap(model, torch.randn_like(generated))
    report = images.report
    assert report.output_loss == loss and report.fallbacks == []
    assert report.last_layer == ("_8" if loss == "REGULARIZED_MIN_MAX_DIFF" else report.last_layer)
    assert np.isclose(sum(report.layer_weights.values()), 11.0 if weighting == "FIRST_LAYER_MULTIPLIER" else 1.0)
    if weighting == "GRAD":
        assert len(set(report.layer_weights.values())) == 2  # measured, not equal
    if granularity == "AllImages":
        assert len(report.final_losses) == 3  # batches of 4, 4 and 2, optimised together


def test_models_without_batch_norm_fall_back_to_the_output_loss(caplog):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(4, 3), nn.BatchNorm1d(3)).eval()
    config = get_pytorch_data_generation_config(n_iter=5, data_gen_batch_size=4, extra_pixels=2,
                                                output_loss_type=mct.data_generation.OutputLossType
                                                .REGULARIZED_MIN_MAX_DIFF, last_layer_types=[nn.Linear])
    with caplog.at_level(logging.WARNING, "hwquant.data_generation"):
        images = pytorch_data_generation_experimental(model, 3, (10, 9), config)
    assert [tuple(i.shape) for i in images] == [(1, 3, 10, 9)] * 3
    report = images.report
    assert report.batch_norm_layers == [] and "BatchNorm1d" in report.ignored_batch_norm_layers["_7"]
    # the only linear layer feeds a batch norm: no last layer for the regularized loss either
    assert report.last_layer is None and report.output_loss == "INVERSE_MIN_MAX_DIFF"
    assert len(report.fallbacks) == 2 and "no batch-norm layer to match" in caplog.text
    assert "INVERSE_MIN_MAX_DIFF on the outputs is used instead" in caplog.text
    # with MCT's default last-layer types the last convolution carries the regularized loss
    config.last_layer_types = [nn.Linear, nn.Conv2d]
    report = pytorch_data_generation_experimental(model, 3, (10, 9), config).report
    assert report.last_layer == "_2" and report.output_loss == "REGULARIZED_MIN_MAX_DIFF" and len(report.fallbacks) == 1


def test_bad_input():
    model = _model()
    config = get_pytorch_data_generation_config(n_iter=1)
    with pytest.raises(InvalidConfigError, match="n_images must be an int >= 1"):
        pytorch_data_generation_experimental(model, 0, 12, config)
    with pytest.raises(InvalidConfigError, match="output_image_size must be"):
        pytorch_data_generation_experimental(model, 1, (12, 0), config)
    with pytest.raises(InvalidConfigError, match="DataGenerationConfig"):
        pytorch_data_generation_experimental(model, 1, 12, {"n_iter": 1})
    with pytest.raises(InvalidConfigError, match="does not run on images of 1 x 30 x 30.*output_image_size"):
        fixed = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(288, 2))
        pytorch_data_generation_experimental(fixed.eval(), 1, 30, config)
    with pytest.raises(InvalidConfigError, match="AllImages optimises all 10000 images at once.*BatchWise"):
        pytorch_data_generation_experimental(model, 10_000, 2048, config)
    no_bn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval()
    with pytest.raises(InvalidConfigError, match="no batch-norm layer to match .* and the output loss is NONE"):
        pytorch_data_generation_experimental(no_bn, 1, 12, get_pytorch_data_generation_config(
            n_iter=1, output_loss_type=mct.data_generation.OutputLossType.NONE))


def test_folding_the_batch_norms_changes_nothing_but_the_time(monkeypatch):
    """The batch norms are folded into their convolutions for speed, the loss written in the folded output's
    scale: the images are those of the unfolded model (to rounding), whatever the output loss reads."""
    from hwquant.data_generation import generator
    dg = mct.data_generation
    model = _model()
    with torch.no_grad():  # (a batch norm with unequal scales and shifts)
        model[1].weight.copy_(torch.linspace(0.5, 2.0, 8))
        model[1].bias.copy_(torch.linspace(-1.0, 1.0, 8))
    config = get_pytorch_data_generation_config(
        n_iter=4, data_gen_batch_size=4, extra_pixels=2, image_granularity=dg.ImageGranularity.AllImages,
        output_loss_type=dg.OutputLossType.REGULARIZED_MIN_MAX_DIFF, output_loss_multiplier=0.1,
        image_normalization_type=dg.ImageNormalizationType.NO_NORMALIZATION, image_clipping=False)
    folded = pytorch_data_generation_experimental(model, 6, 12, config)
    monkeypatch.setattr(generator, "MIN_FOLDED_SCALE", float("inf"))
    unfolded = pytorch_data_generation_experimental(model, 6, 12, config)
    assert folded.report.folded_batch_norms == 2 and unfolded.report.folded_batch_norms == 0
    torch.testing.assert_close(torch.cat(folded), torch.cat(unfolded), atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(folded.report.final_losses, unfolded.report.final_losses, rtol=1e-4)


def test_generated_images_feed_gptq_mixed_precision_and_qat():
    """The generated images as the representative data of GPTQ, mixed precision under a memory target and QAT
    init: each runs, and the quantized model follows the float one on the images it was calibrated with."""
    model = _model()
    config = get_pytorch_data_generation_config(
        n_iter=40, data_gen_batch_size=8, extra_pixels=2, image_clipping=False,
        image_normalization_type=mct.data_generation.ImageNormalizationType.NO_NORMALIZATION)
    images = torch.cat(pytorch_data_generation_experimental(model, 8, 12, config))

    def representative_data_gen():
        yield [images]
    with torch.no_grad():
        reference = model(images)
    gptq, _ = mct.gptq.pytorch_gradient_post_training_quantization(
        model, representative_data_gen, gptq_config=mct.gptq.get_pytorch_gptq_config(n_epochs=1))
    core = mct.core.CoreConfig(mixed_precision_config=mct.core.MixedPrecisionQuantizationConfig(
        num_of_images=8, use_hessian_based_scores=False))
    ru = mct.core.pytorch_resource_utilization_data(model, representative_data_gen, core)
    mixed, info = mct.ptq.pytorch_post_training_quantization(
        model, representative_data_gen, target_resource_utilization=mct.core.ResourceUtilization(
            ru.weights_memory * 0.75), core_config=core)
    assert info.final_resource_utilization.weights_memory <= ru.weights_memory * 0.75
    qat, _ = mct.qat.pytorch_quantization_aware_training_init_experimental(model, representative_data_gen)
    for quantized in (gptq, mixed, qat):
        with torch.no_grad():
            out = quantized(images)
        assert ((out - reference).norm() / reference.norm()) < 0.3


class _Focus(nn.Module):
    """YOLOX's stem: space to depth (3 channels become 12 at half the size), then a convolution."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(12, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x):
        x = torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]], dim=1)
        return self.bn(self.conv(x)).mean((2, 3))


def test_the_channel_count_is_the_models_not_its_first_convolutions():
    config = get_pytorch_data_generation_config(n_iter=2, data_gen_batch_size=2, extra_pixels=2)
    images = pytorch_data_generation_experimental(_Focus().eval(), 2, 16, config)
    assert [tuple(i.shape) for i in images] == [(1, 3, 16, 16)] * 2


class _NamedLikeTheFold(nn.Module):
    """A convolution 'conv' and its batch norm 'conv_bn': the name the folded convolution takes."""

    def __init__(self):
        super().__init__()
        self.conv, self.conv_bn, self.head = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.conv_bn(self.conv(x))).mean((2, 3)))


def test_a_batch_norm_named_as_its_folded_layer(monkeypatch):
    from hwquant.data_generation import generator
    torch.manual_seed(0)
    model = _NamedLikeTheFold().eval()
    with torch.no_grad():
        model.conv_bn.running_mean.copy_(torch.linspace(-1.0, 1.0, 8))
        model.conv_bn.weight.copy_(torch.linspace(0.5, 2.0, 8))
    config = get_pytorch_data_generation_config(n_iter=3, data_gen_batch_size=4, extra_pixels=2)
    folded = pytorch_data_generation_experimental(model, 4, 12, config)
    assert folded.report.folded_batch_norms == 1 and folded.report.batch_norm_layers == ["conv_bn"]
    monkeypatch.setattr(generator, "MIN_FOLDED_SCALE", float("inf"))
    unfolded = pytorch_data_generation_experimental(model, 4, 12, config)
    torch.testing.assert_close(torch.cat(folded), torch.cat(unfolded), atol=2e-4, rtol=1e-4)
