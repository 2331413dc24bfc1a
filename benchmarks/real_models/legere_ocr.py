"""legere's CompactCRNN printed-line OCR: a depthwise-separable CNN + BiGRU with CTC over grey 32x256 text lines.
Weights: data/model.pt of PyPI legere 0.11.0."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .common import RealModel, _finish, _need, _torch_load
from .images import _random_text, _render_line


LEGERE_CHARSET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                  "áàâãçéêíóôõúüÁÀÂÃÇÉÊÍÓÔÕÚÜ .,;:!?'\"()[]{}%$#@&*+-=/\\_<>|°ºª")
LEGERE_W = 256


class DWSepBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn2(self.pointwise(self.relu(self.bn1(self.depthwise(x))))))


class LegereCRNN(nn.Module):
    """(B, 1, 32, W) grey line in [-1, 1] -> (B, W/4, 1 + len(charset)) CTC logits (class 0 blank)."""

    SPEC = ((24, 48, (2, 2)), (48, 64, (1, 1)), (64, 96, (2, 1)), (96, 128, (1, 1)),
            (128, 160, (2, 1)), (160, 192, (2, 1)))

    def __init__(self, n_classes: int = len(LEGERE_CHARSET) + 1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True))
        self.blocks = nn.Sequential(*[DWSepBlock(i, o, s) for i, o, s in self.SPEC])
        self.rnn = nn.GRU(192, 128, num_layers=1, batch_first=True, bidirectional=True)
        self.head = nn.Linear(256, n_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))            # (B, 192, 1, W/4)
        x, _ = self.rnn(x.squeeze(2).transpose(1, 2))
        return self.head(x)


def legere_lines(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """Rendered printed lines (dark on light, grey) at height 32, padded white to width 256."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    batch = torch.ones(n, 1, 32, LEGERE_W)
    texts = []
    for i in range(n):
        text = _random_text(rng, (1, 3))
        while True:
            size = int(rng.integers(18, 40))
            g = int(rng.integers(0, 70)), int(rng.integers(200, 256))
            img = _render_line(text, size, (g[0],) * 3, (g[1],) * 3).convert("L")
            w = max(8, round(img.width * 32 / img.height))
            if w <= LEGERE_W:
                break
            text = text.rsplit(" ", 1)[0] if " " in text else text[: max(1, len(text) // 2)]
        a = np.asarray(img.resize((w, 32), Image.BILINEAR), dtype=np.float32)
        batch[i, 0, :, :w] = torch.from_numpy(a / 127.5 - 1.0)
        texts.append(text)
    return batch, texts


def load_legere() -> RealModel:
    ckpt = _torch_load(_need("legere/legere/data/model.pt"))
    if ckpt.get("charset", LEGERE_CHARSET) != LEGERE_CHARSET:
        raise RuntimeError("legere checkpoint has an unexpected charset")
    model = _finish(LegereCRNN(), ckpt["model"])
    return RealModel(model, lambda n, seed=0: [legere_lines(n, seed)[0]],
                     "legere CompactCRNN printed-line OCR (depthwise-separable CNN + BiGRU, CTC), "
                     "1x32x256 grey lines; PyPI legere 0.11.0",
                     "string (CTC greedy decode, character error rate)")
