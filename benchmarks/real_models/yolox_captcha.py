"""ddddocr's YOLOX character detector (Focus stem, CSP-Darknet, PAN, decoupled head; one class), converted from
ONNX by onnx2torch (onnx_convert.py), on click-captcha-like images, and the decoding of its anchors. Weights:
common_det.onnx of PyPI ddddocr 1.6.1 (exported at batch 1; its reshapes made batch-free)."""
from __future__ import annotations

import numpy as np
import torch

from .common import RealModel
from .images import _font, _photo_crop
from .onnx_convert import onnx2torch_model


CAPTCHA_GLYPHS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def yolox_captchas(n: int, seed: int, size: int = 416) -> tuple[torch.Tensor, list[list[tuple]]]:
    """Click-captcha-like images (a photo crop with 3-5 large coloured glyphs), letterboxed into size x size
    with grey 114 as ddddocr feeds its detector (BGR, 0..255); and the glyph boxes in the letterboxed image."""
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    out, boxes = [], []
    for _ in range(n):
        w, h = int(rng.integers(260, size + 1)), int(rng.integers(130, 300))
        img = _photo_crop(rng, (w, h))
        draw = ImageDraw.Draw(img)
        bxs = []
        for _ in range(int(rng.integers(3, 6))):
            glyph = CAPTCHA_GLYPHS[int(rng.integers(0, len(CAPTCHA_GLYPHS)))]
            font = _font(int(rng.integers(30, 60)))
            left, t, r, b = draw.textbbox((0, 0), glyph, font=font, stroke_width=2)
            for _ in range(20):  # place without overlapping earlier glyphs
                x, y = int(rng.integers(2, w - (r - left) - 2)), int(rng.integers(2, h - (b - t) - 2))
                box = (x, y, x + r - left, y + b - t)
                if all(box[2] < o[0] or box[0] > o[2] or box[3] < o[1] or box[1] > o[3] for o in bxs):
                    break
            else:
                continue
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            draw.text((x - left, y - t), glyph, font=font, fill=colour, stroke_width=2,
                      stroke_fill=(255, 255, 255) if sum(colour) < 380 else (0, 0, 0))
            bxs.append(box)
        ratio = min(size / w, size / h)
        canvas = Image.new("RGB", (size, size), (114, 114, 114))
        canvas.paste(img.resize((int(w * ratio), int(h * ratio)), Image.BILINEAR), (0, 0))
        out.append(torch.from_numpy(np.asarray(canvas, np.float32)).permute(2, 0, 1).flip(0))
        boxes.append([tuple(v * ratio for v in bx) for bx in bxs])
    return torch.stack(out), boxes


def yolox_decode(out: torch.Tensor, size: int = 416) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, A, 6) raw YOLOX outputs -> (B, A, 4) boxes (cx, cy, w, h in pixels), (B, A) scores (obj x class),
    as ddddocr decodes them (strides 8, 16, 32)."""
    grids, strides = [], []
    for stride in (8, 16, 32):
        n = size // stride
        yv, xv = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        grids.append(torch.stack((xv, yv), -1).reshape(-1, 2))
        strides.append(torch.full((n * n, 1), stride))
    grid, stride = torch.cat(grids).float(), torch.cat(strides).float()
    xy = (out[..., :2] + grid) * stride
    wh = out[..., 2:4].exp() * stride
    return torch.cat([xy, wh], -1), out[..., 4] * out[..., 5]


def load_yolox() -> RealModel:
    return RealModel(onnx2torch_model("ddddocr_det_yolox"), lambda n, seed=0: [yolox_captchas(n, seed)[0]],
                     "ddddocr's YOLOX character detector (Focus stem, CSP-Darknet, PAN, decoupled head; 1 class), "
                     "3x416x416 BGR 0..255 -> 3549 anchors x (box, objectness, class); ONNX in PyPI ddddocr 1.6.1 "
                     "(exported at batch 1; its reshapes made batch-free), onnx2torch", "detection agreement")
