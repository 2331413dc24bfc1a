"""mct.data_generation's PyTorch path (issue 32, in progress): images generated from a batch-norm model alone
match its batch norms' statistics better than their start, have the asked shape, and calibrate PTQ."""
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


def test_bad_input():
    model = _model()
    config = get_pytorch_data_generation_config(n_iter=1)
    with pytest.raises(InvalidConfigError, match="n_images must be an int >= 1"):
        pytorch_data_generation_experimental(model, 0, 12, config)
    with pytest.raises(InvalidConfigError, match="output_image_size must be"):
        pytorch_data_generation_experimental(model, 1, (12, 0), config)
    with pytest.raises(InvalidConfigError, match="DataGenerationConfig"):
        pytorch_data_generation_experimental(model, 1, 12, {"n_iter": 1})
    no_bn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval()
    with pytest.raises(InvalidConfigError, match="no batch-norm layer to match and the output loss is NONE"):
        pytorch_data_generation_experimental(no_bn, 1, 12, get_pytorch_data_generation_config(
            n_iter=1, output_loss_type=mct.data_generation.OutputLossType.NONE))
