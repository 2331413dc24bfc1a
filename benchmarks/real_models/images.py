"""Image inputs of the vision families: natural photos (benchmarks/assets.py) cropped at random, and English words
rendered with Pillow's bundled font (text lines, words drawn on photos)."""
from __future__ import annotations

import functools

import numpy as np
import torch


WORDS = ("the quick brown fox jumps over lazy dog hello world model quantize integer float tensor "
         "camera street coffee market garden river summer winter school office number letter "
         "station window yellow orange purple silver golden simple sample detect recognize "
         "network python engine memory signal Paris London Tokyo Berlin Monday Friday "
         "OPEN CLOSED EXIT SALE STOP 2024 42 3.14 100% $25 A-7 No.5 e-mail").split()


@functools.lru_cache(maxsize=None)
def _font(size: int):
    from PIL import ImageFont
    return ImageFont.load_default(size=size)  # Pillow's bundled FreeType font: same on every machine


def _random_text(rng: np.random.Generator, n_words: tuple[int, int] = (1, 3)) -> str:
    k = int(rng.integers(n_words[0], n_words[1] + 1))
    return " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), k))


def _render_line(text: str, size: int, fg, bg, margin: int = 3):
    """Text line as a PIL RGB image cropped to the ink bounding box plus `margin` pixels."""
    from PIL import Image, ImageDraw
    font = _font(size)
    x0, y0, x1, y1 = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=font)
    img = Image.new("RGB", (x1 - x0 + 2 * margin, y1 - y0 + 2 * margin), bg)
    ImageDraw.Draw(img).text((margin - x0, margin - y0), text, font=font, fill=fg)
    return img


def _line_colours(rng: np.random.Generator):
    """Dark-on-light most of the time, sometimes light-on-dark; always high contrast."""
    dark = tuple(int(v) for v in rng.integers(0, 70, 3))
    light = tuple(int(v) for v in rng.integers(190, 256, 3))
    return (dark, light) if rng.uniform() < 0.8 else (light, dark)


def _pil_to_tensor01(img) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)


def _imagenet_normalise(x01: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
    return (x01 - mean) / std


@functools.lru_cache(maxsize=1)
def _photos():
    from benchmarks import assets
    return assets.natural_images()


def _photo_crop(rng: np.random.Generator, size: tuple[int, int]):
    """A random crop of a natural photo (benchmarks/assets.py), resized to size=(w, h)."""
    from PIL import Image
    photos = _photos()
    img = photos[int(rng.integers(0, len(photos)))]
    w, h = img.size
    s = rng.uniform(0.4, 1.0)
    cw, ch = max(16, int(w * s)), max(16, int(h * s))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    return img.crop((x, y, x + cw, y + ch)).resize(size, Image.BILINEAR)


def _word_scene(rng: np.random.Generator, size: int, n_words: tuple[int, int] = (1, 3),
                font_sizes: tuple[int, int] = (22, 40)):
    """A natural-photo crop (size x size) with words drawn on it; returns (PIL image, word boxes)."""
    from PIL import ImageDraw
    img = _photo_crop(rng, (size, size))
    draw = ImageDraw.Draw(img)
    bxs = []
    for _ in range(int(rng.integers(n_words[0], n_words[1] + 1))):
        text = _random_text(rng, (1, 1))
        font = _font(int(rng.integers(*font_sizes)))
        left, t, r, b = draw.textbbox((0, 0), text, font=font)
        if r - left >= size - 8:
            continue
        for _ in range(20):  # place without overlapping earlier words
            x = int(rng.integers(4, size - (r - left) - 4))
            y = int(rng.integers(4, size - (b - t) - 4))
            box = (x, y, x + r - left, y + b - t)
            if all(box[2] < o[0] - 4 or box[0] > o[2] + 4 or box[3] < o[1] - 4 or box[1] > o[3] + 4 for o in bxs):
                break
        else:
            continue
        patch = np.asarray(img.crop(box)).reshape(-1, 3).mean(0)
        fg = (255, 255, 255) if patch.mean() < 128 else (0, 0, 0)  # contrast with the background
        pad = 3
        draw.rectangle((box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad),
                       fill=tuple(int(255 - v) for v in fg) if rng.uniform() < 0.5 else None)
        draw.text((x - left, y - t), text, font=font, fill=fg)
        bxs.append(box)
    return img, bxs


def _coloured_line(rng: np.random.Generator, text: str):
    """`text` rendered in colour at a random size and margin, on a photo patch 30 % of the time (PIL RGB)."""
    from PIL import Image
    fg, bg = _line_colours(rng)
    img = _render_line(text, int(rng.integers(24, 44)), fg, bg, margin=int(rng.integers(3, 10)))
    if rng.uniform() < 0.3:  # the same ink on a photo patch
        photo = _photo_crop(rng, img.size)
        ink = np.abs(np.asarray(img, np.float32) - np.asarray(bg, np.float32)).sum(-1) > 60
        a = np.asarray(photo).copy()
        a[ink] = np.asarray(fg if np.asarray(photo).mean() > 110 else (255, 255, 255))
        img = Image.fromarray(a)
    return img
