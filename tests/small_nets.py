"""The small convolutional network the training tests (QAT, GPTQ) quantize: conv-BN-ReLU-pool, a
residual conv-ReLU, a dense head; with random batch-norm statistics, so that folding them matters."""
import torch
import torch.nn.functional as F
from torch import nn


class SmallConvNet(nn.Module):
    """For 16 x 16 inputs. ``pooled_head``: the dense layer reads the global average (few weights per
    sample: GPTQ cannot overfit it); else the flattened 4 x 4 map."""

    def __init__(self, channels: int = 8, classes: int = 5, pooled_head: bool = False):
        super().__init__()
        self.pooled_head = pooled_head
        self.c1 = nn.Conv2d(3, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.c2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.fc = nn.Linear(channels if pooled_head else channels * 4 * 4, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
        x = x + F.relu(self.c2(x))
        if self.pooled_head:
            return self.fc(x.mean((2, 3)))
        return self.fc(torch.flatten(F.max_pool2d(x, 2), 1))


def seeded_net(**kwargs) -> SmallConvNet:
    """The network from seed 0, batch-norm statistics randomised, in eval mode."""
    torch.manual_seed(0)
    model = SmallConvNet(**kwargs)
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.2, 0.2)
        model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval()
