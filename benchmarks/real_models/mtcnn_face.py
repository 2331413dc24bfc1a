"""MTCNN face detector: the P-Net / R-Net / O-Net cascade (PReLU CNNs), the cascade itself (mtcnn_detect) and the
crops it feeds R-Net and O-Net from real photos. Weights: data/pnet.pt, rnet.pt, onet.pt of PyPI facenet-pytorch
2.6.0."""
from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .common import RealModel, _finish, _need, _torch_load
from .images import _photo_crop, _photos, _pil_to_tensor01


MTCNN_DIR = "facenet-pytorch/facenet_pytorch/data"


class PNet(nn.Module):
    """Fully convolutional proposal net: (B, 3, H, W) -> box offsets (B, 4, h, w), face prob (B, 2, h, w)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 10, 3), nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(10, 16, 3), nn.PReLU(16)
        self.conv3, self.prelu3 = nn.Conv2d(16, 32, 3), nn.PReLU(32)
        self.conv4_1 = nn.Conv2d(32, 2, 1)
        self.conv4_2 = nn.Conv2d(32, 4, 1)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        return self.conv4_2(x), torch.softmax(self.conv4_1(x), dim=1)


class RNet(nn.Module):
    """Refinement net: (B, 3, 24, 24) -> box offsets (B, 4), face prob (B, 2)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x))
        x = x.permute(0, 3, 2, 1).flatten(1)  # the converted dense weights expect (W, H, C) order
        x = self.prelu4(self.dense4(x))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), dim=1)


class ONet(nn.Module):
    """Output net: (B, 3, 48, 48) -> box offsets (B, 4), 5 landmarks (B, 10), face prob (B, 2)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = self.prelu5(self.dense5(x.permute(0, 3, 2, 1).flatten(1)))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), dim=1)


def _mtcnn_net(cls, fname: str) -> nn.Module:
    return _finish(cls(), _torch_load(_need(f"{MTCNN_DIR}/{fname}")))


def mtcnn_normalise(img_uint8_chw: torch.Tensor) -> torch.Tensor:
    return (img_uint8_chw.float() - 127.5) * 0.0078125


def _nms(boxes: torch.Tensor, scores: torch.Tensor, thr: float, mode: str = "union") -> torch.Tensor:
    order = scores.argsort(descending=True)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    keep = []
    while order.numel():
        i, rest = order[0], order[1:]
        keep.append(int(i))
        w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest]) + 1).clamp_min(0)
        h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest]) + 1).clamp_min(0)
        inter = w * h
        denom = torch.minimum(area[i], area[rest]) if mode == "min" else area[i] + area[rest] - inter
        order = rest[inter / denom <= thr]
    return torch.tensor(keep, dtype=torch.long)


def _bbreg(b: torch.Tensor, reg: torch.Tensor) -> torch.Tensor:
    w, h = b[:, 2] - b[:, 0] + 1, b[:, 3] - b[:, 1] + 1
    return torch.stack([b[:, 0] + reg[:, 0] * w, b[:, 1] + reg[:, 1] * h,
                        b[:, 2] + reg[:, 2] * w, b[:, 3] + reg[:, 3] * h], 1)


def _square(b: torch.Tensor) -> torch.Tensor:
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    side = torch.maximum(w, h)
    x1, y1 = b[:, 0] + w * 0.5 - side * 0.5, b[:, 1] + h * 0.5 - side * 0.5
    return torch.stack([x1, y1, x1 + side, y1 + side], 1)


def _crops(img: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Crop integer boxes (zero padding outside the image) and resize to size x size (area)."""
    _, H, W = img.shape
    out = []
    for x1, y1, x2, y2 in boxes.round().long().tolist():
        patch = torch.zeros(3, max(1, y2 - y1), max(1, x2 - x1))
        sx1, sy1, sx2, sy2 = max(0, x1), max(0, y1), min(W, x2), min(H, y2)
        if sx2 > sx1 and sy2 > sy1:
            patch[:, sy1 - y1:sy2 - y1, sx1 - x1:sx2 - x1] = img[:, sy1:sy2, sx1:sx2]
        out.append(F.interpolate(patch[None], size=(size, size), mode="area")[0])
    return torch.stack(out) if out else torch.zeros(0, 3, size, size)


def mtcnn_detect(img_rgb: np.ndarray, nets=None, min_face: int = 20, thresholds=(0.6, 0.7, 0.7),
                 factor: float = 0.709, stage: int = 3):
    """MTCNN cascade on one HxWx3 uint8 RGB image.

    stage=3: (boxes (K, 4) x1 y1 x2 y2, face probs (K,), landmarks (K, 5, 2)).
    stage=1 or 2: the candidate boxes after P-Net or R-Net (inputs of the next stage).
    """
    pnet, rnet, onet = nets or (_mtcnn_net(PNet, "pnet.pt"), _mtcnn_net(RNet, "rnet.pt"), _mtcnn_net(ONet, "onet.pt"))
    img = torch.from_numpy(np.array(img_rgb, dtype=np.uint8)).permute(2, 0, 1).float()
    H, W = img.shape[1:]
    m = 12.0 / min_face
    scales, minl = [], min(H, W) * m
    while minl >= 12:
        scales.append(m * factor ** len(scales))
        minl *= factor
    cands = []
    with torch.no_grad():
        for s in scales:
            hs, ws = int(H * s + 1), int(W * s + 1)
            x = mtcnn_normalise(F.interpolate(img[None], size=(hs, ws), mode="area"))
            reg, prob = pnet(x)
            p = prob[0, 1]
            ys, xs = torch.nonzero(p >= thresholds[0], as_tuple=True)
            if ys.numel() == 0:
                continue
            pos = torch.stack([xs, ys], 1).float()
            q1, q2 = ((2 * pos + 1) / s).floor(), ((2 * pos + 12) / s).floor()
            b = torch.cat([q1, q2, p[ys, xs, None], reg[0][:, ys, xs].T], 1)
            cands.append(b[_nms(b[:, :4], b[:, 4], 0.5)])
        if not cands:
            return (torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, 5, 2)) if stage == 3 else torch.zeros(0, 4)
        b = torch.cat(cands)
        b = b[_nms(b[:, :4], b[:, 4], 0.7)]
        boxes = _square(_bbreg(b[:, :4], b[:, 5:9]))
        if stage == 1:
            return boxes
        reg, prob = rnet(mtcnn_normalise(_crops(img, boxes, 24)))
        keep = prob[:, 1] > thresholds[1]
        boxes, reg, score = boxes[keep], reg[keep], prob[keep, 1]
        k = _nms(boxes, score, 0.7)
        boxes = _square(_bbreg(boxes[k], reg[k]))
        if stage == 2:
            return boxes
        reg, lmk, prob = onet(mtcnn_normalise(_crops(img, boxes, 48)))
        keep = prob[:, 1] > thresholds[2]
        boxes, reg, lmk, score = boxes[keep], reg[keep], lmk[keep], prob[keep, 1]
        w, h = (boxes[:, 2] - boxes[:, 0] + 1)[:, None], (boxes[:, 3] - boxes[:, 1] + 1)[:, None]
        pts = torch.stack([boxes[:, :1] + lmk[:, :5] * w, boxes[:, 1:2] + lmk[:, 5:] * h], 2)
        boxes = _bbreg(boxes, reg)
        k = _nms(boxes, score, 0.7, mode="min")
        return boxes[k], score[k], pts[k]


@functools.lru_cache(maxsize=4)
def _mtcnn_candidates(stage: int, max_side: int = 480) -> torch.Tensor:
    """Candidate crops that the cascade feeds to R-Net (stage 1) / O-Net (stage 2), from every
    natural photo plus skimage's astronaut: real faces and the non-faces that survive earlier stages."""
    import skimage.data
    from PIL import Image
    nets = (_mtcnn_net(PNet, "pnet.pt"), _mtcnn_net(RNet, "rnet.pt"), _mtcnn_net(ONet, "onet.pt"))
    size = 24 if stage == 1 else 48
    out = []
    for photo in [Image.fromarray(skimage.data.astronaut())] + list(_photos()):
        s = max_side / max(photo.size)
        if s < 1:
            photo = photo.resize((round(photo.width * s), round(photo.height * s)), Image.BILINEAR)
        a = np.asarray(photo.convert("RGB"))
        boxes = mtcnn_detect(a, nets, stage=stage)
        img = torch.from_numpy(np.array(a, dtype=np.uint8)).permute(2, 0, 1).float()
        out.append(_crops(img, boxes[:64], size))
    return mtcnn_normalise(torch.cat(out))


def _mtcnn_crop_inputs(stage: int):
    def make_inputs(n: int, seed: int = 0):
        pool = _mtcnn_candidates(stage)
        idx = torch.from_numpy(np.random.default_rng(seed).choice(len(pool), n, replace=n > len(pool)))
        return [pool[idx]]
    return make_inputs


def _mtcnn_photo_inputs(n: int, seed: int = 0, size: int = 160):
    rng = np.random.default_rng(seed)
    x = torch.stack([_pil_to_tensor01(_photo_crop(rng, (size, size))) * 255 for _ in range(n)])
    return [mtcnn_normalise(x)]


def load_mtcnn_pnet() -> RealModel:
    return RealModel(_mtcnn_net(PNet, "pnet.pt"), _mtcnn_photo_inputs,
                     "MTCNN P-Net face proposal net (fully convolutional, PReLU), 3x160x160 photo crops; "
                     "PyPI facenet-pytorch 2.6.0 (data/pnet.pt)",
                     "detection boxes (face-prob map + box offsets)")


def load_mtcnn_rnet() -> RealModel:
    return RealModel(_mtcnn_net(RNet, "rnet.pt"), _mtcnn_crop_inputs(1),
                     "MTCNN R-Net face refinement net, 3x24x24 P-Net candidates from real photos; "
                     "PyPI facenet-pytorch 2.6.0 (data/rnet.pt)",
                     "detection boxes (face prob + box offsets)")


def load_mtcnn_onet() -> RealModel:
    return RealModel(_mtcnn_net(ONet, "onet.pt"), _mtcnn_crop_inputs(2),
                     "MTCNN O-Net face output net (prob, box, 5 landmarks), 3x48x48 R-Net candidates "
                     "from real photos; PyPI facenet-pytorch 2.6.0 (data/onet.pt)",
                     "detection boxes (face prob + box offsets + landmarks)")
