"""Models and data for the command-line tests, named as a user names them: 'cli_models:small_cnn'."""
import numpy as np


def small_cnn(seed: int = 0):
    """A seeded conv-bn-relu / depthwise / pooled linear classifier on 3x16x16 images (PyTorch)."""
    import torch
    from torch import nn
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU6(),
                          nn.Conv2d(8, 16, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.2, 0.2)
        model[1].running_var.uniform_(0.5, 1.5)
    return model.eval()


def other_cnn():
    """The same architecture with other weights (a file exported from it is not small_cnn's)."""
    return small_cnn(seed=1)


def batches():
    """Representative batches as a generator of lists (MCT's representative_data_gen form)."""
    rng = np.random.default_rng(0)
    for _ in range(4):
        yield [rng.normal(size=(8, 3, 16, 16)).astype(np.float32)]
