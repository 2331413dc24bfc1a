"""PP-OCRv4 mobile (converted from ONNX by onnx2torch, onnx_convert.py): the DBNet text detector (PP-LCNetV3
backbone, RSE-FPN, DB head) on photos with words drawn on, and the SVTR-LCNet text recogniser (CTC over 6624
characters) on colour text lines; both read BGR in [-1, 1]. Weights: the ONNX files of PyPI rapidocr-onnxruntime
1.4.4."""
from __future__ import annotations

import math

import numpy as np
import torch

from .common import RealModel, _need
from .images import _coloured_line, _pil_to_tensor01, _random_text, _word_scene
from .onnx_convert import ONNX_MODELS, onnx2torch_model


def _bgr_pm1(img) -> torch.Tensor:
    """PaddleOCR's input: the image as OpenCV holds it (BGR), x / 255 scaled to [-1, 1]."""
    return (_pil_to_tensor01(img).flip(0) - 0.5) / 0.5


def ppocr_det_scenes(n: int, seed: int, size: int = 320) -> tuple[torch.Tensor, list[list[tuple]]]:
    """Natural-photo crops with 2-5 words drawn on each, as PP-OCR's detector reads them; and the word boxes."""
    rng = np.random.default_rng(seed)
    out, boxes = [], []
    for _ in range(n):
        img, bxs = _word_scene(rng, size, (2, 5), (18, 44))
        out.append(_bgr_pm1(img))
        boxes.append(bxs)
    return torch.stack(out), boxes


def ppocr_rec_lines(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """Rendered text lines (colour, some on photo backgrounds) as PP-OCR's recogniser reads them: height 48,
    width <= 320 at the line's aspect ratio, BGR in [-1, 1], zero right-padding."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    out, texts = torch.zeros(n, 3, 48, 320), []
    for i in range(n):
        text = _random_text(rng, (1, 3))
        img = _coloured_line(rng, text)
        w = min(320, max(1, math.ceil(48 * img.width / img.height)))
        out[i, :, :, :w] = _bgr_pm1(img.resize((w, 48), Image.BILINEAR))
        texts.append(text)
    return out, texts


def ppocr_rec_charset() -> list[str]:
    """Class i >= 1 of the recogniser is charset[i - 1]: the dictionary in the file's metadata, then a space."""
    import onnx
    meta = {p.key: p.value for p in onnx.load(str(_need(ONNX_MODELS["ppocr_rec_svtr"][0]))).metadata_props}
    return meta["character"].splitlines() + [" "]


def load_ppocr_det() -> RealModel:
    return RealModel(onnx2torch_model("ppocr_det_dbnet"), lambda n, seed=0: [ppocr_det_scenes(n, seed)[0]],
                     "PP-OCRv4 mobile text detector (DBNet: PP-LCNetV3 backbone, RSE-FPN, DB head), 3x320x320 "
                     "BGR in [-1, 1] -> text probability map; ONNX in PyPI rapidocr-onnxruntime 1.4.4, onnx2torch",
                     "text-region F1 (p > 0.3)")


def load_ppocr_rec() -> RealModel:
    return RealModel(onnx2torch_model("ppocr_rec_svtr"), lambda n, seed=0: [ppocr_rec_lines(n, seed)[0]],
                     "PP-OCRv4 mobile text recogniser (SVTR-LCNet: PP-LCNetV3 + SVTR mixing blocks, CTC over "
                     "6624 characters), 3x48x320 BGR in [-1, 1]; ONNX in PyPI rapidocr-onnxruntime 1.4.4, onnx2torch",
                     "string agreement")
