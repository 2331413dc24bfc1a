"""What the commands read: models (files or 'module:callable'), input data (image folders, .npy / .npz arrays,
'module:callable' batches) and the framework adapter that runs them. Bad input is a click.BadParameter: one line
that says what is wrong and what to pass, exit code 2."""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

import click
import numpy as np

from hwquant.cli.quiet import framework_import
from hwquant.errors import UnsafeModelFileError
from hwquant.logger import progress
from hwquant.model_files import TRUST_HELP

TORCH_SUFFIXES = (".pt2", ".pt", ".pth", ".torchscript", ".ts", ".jit", ".onnx")
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".ppm", ".pgm")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# ---- frameworks ---------------------------------------------------------------------------------------------
def _choose_keras_backend() -> None:
    """Keras picks TensorFlow when KERAS_BACKEND is unset; where TensorFlow is not installed, use torch (then
    jax) instead of failing on the import."""
    if os.environ.get("KERAS_BACKEND") or importlib.util.find_spec("tensorflow"):
        return
    for backend in ("torch", "jax"):
        if importlib.util.find_spec(backend):
            os.environ["KERAS_BACKEND"] = backend
            return


def adapter(framework: str) -> ModuleType:
    """The framework's command-line adapter: hwquant.torch.command_line or hwquant.keras.command_line (NAME,
    CHANNELS_LAST, EXPORTS, is_model, load_model, load_quantized, predict, export, run_exported)."""
    if framework == "keras":
        _choose_keras_backend()
    package = "torch" if framework == "pytorch" else "keras"
    try:
        with framework_import():  # (TensorFlow's import banners kept off the command's output)
            return importlib.import_module(f"hwquant.{package}.command_line")
    except ImportError as e:
        extra = "torch" if package == "torch" else "keras"
        raise click.UsageError(f"{framework} is not installed here ({e}): pip install \"hwquant[{extra}]\"") from None


def framework_of_file(path: str) -> str:
    if path.endswith(KERAS_SUFFIXES):
        return "keras"
    if path.endswith(TORCH_SUFFIXES) or is_callable_spec(path):
        return "pytorch"
    raise click.BadParameter(f"'{path}': expected a PyTorch file ({', '.join(TORCH_SUFFIXES)}), a Keras file "
                             f"({', '.join(KERAS_SUFFIXES)}) or 'package.module:function' returning the model")


def framework_of_object(obj: Any) -> Optional[str]:
    """'keras' or 'pytorch' by the object's classes (a Keras model on the torch backend is a torch Module too)."""
    roots = {c.__module__.split(".")[0] for c in type(obj).__mro__}
    if roots & {"keras", "tf_keras", "tensorflow"}:
        return "keras"
    return "pytorch" if "torch" in roots else None


# ---- models -------------------------------------------------------------------------------------------------
def is_callable_spec(spec: str) -> bool:
    """'package.module:name' or 'path/to/file.py:name' (and not an existing file, e.g. C:\\...)."""
    return ":" in spec and not os.path.exists(spec) and bool(spec.rpartition(":")[2].isidentifier())


def load_callable(spec: str, param_hint: str) -> Any:
    """The object 'module:name' or 'file.py:name' names; the current folder is importable, as for `python -m`."""
    module_name, _, name = spec.rpartition(":")
    try:
        with framework_import():  # (the module may import TensorFlow)
            if module_name.endswith(".py"):
                if not os.path.isfile(module_name):
                    raise ImportError(f"no file '{module_name}'")
                loaded = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
                assert loaded is not None and loaded.loader is not None
                module = importlib.util.module_from_spec(loaded)
                loaded.loader.exec_module(module)
            else:
                if os.getcwd() not in sys.path:
                    sys.path.insert(0, os.getcwd())
                module = importlib.import_module(module_name)
        return getattr(module, name)
    except (ImportError, AttributeError, SyntaxError) as e:
        raise click.BadParameter(f"cannot import '{spec}': {type(e).__name__}: {e}", param_hint=param_hint) from None


def load_model(spec: str, param_hint: str = "MODEL", trust: bool = False) -> Tuple[ModuleType, Any]:
    """(framework adapter, float model) from a model file or 'module:callable' returning the model. A file that
    would run code when read is refused unless `trust` (--trust-model-file; hwquant.model_files)."""
    if is_callable_spec(spec):
        factory = load_callable(spec, param_hint)
        with framework_import():  # (the factory may import TensorFlow)
            model = factory() if callable(factory) and not framework_of_object(factory) else factory
        framework = framework_of_object(model)
        if framework is None:
            raise click.BadParameter(f"'{spec}' gave a {type(model).__name__}, not a torch.nn.Module or keras.Model",
                                     param_hint=param_hint)
        return adapter(framework), model
    if not os.path.isfile(spec):
        raise click.BadParameter(f"no file at '{spec}'", param_hint=param_hint)
    if not os.access(spec, os.R_OK):
        raise click.BadParameter(f"cannot read '{spec}' (permission denied)", param_hint=param_hint)
    fw = adapter(framework_of_file(spec))
    try:
        return fw, fw.load_model(spec, trust=trust)
    except UnsafeModelFileError as e:  # said as it is: what the file asks to run, and the ways out
        raise click.BadParameter(str(e), param_hint=param_hint) from None
    except Exception as e:  # noqa: BLE001 - any reader's failure is a bad model file, said in one line
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise click.BadParameter(f"cannot read '{spec}' as a {fw.NAME} model: {message}", param_hint=param_hint) \
            from None


def load_float_model(spec: str, trust: bool = False) -> Any:
    return load_model(spec, "FLOAT_MODEL", trust=trust)[1]


def load_quantized_model(path: str, param_hint: str = "QUANTIZED_MODEL", trust: bool = False) -> Any:
    if not os.path.isfile(path):
        raise click.BadParameter(f"no file at '{path}'", param_hint=param_hint)
    fw = adapter(framework_of_file(path))
    try:
        return fw.load_quantized(path, trust=trust)
    except UnsafeModelFileError as e:
        raise click.BadParameter(str(e), param_hint=param_hint) from None
    except Exception as e:  # noqa: BLE001
        raise click.BadParameter(f"cannot read '{path}' as a model quantized by hwquant: {str(e).splitlines()[0]}",
                                 param_hint=param_hint) from None


def trust_option(command: Any) -> Any:
    """The --trust-model-file flag of a command that reads model files."""
    return click.option("--trust-model-file", "trust_model_file", is_flag=True, help=TRUST_HELP)(command)


# ---- data ---------------------------------------------------------------------------------------------------
def load_arrays(path: str, what: str) -> List[np.ndarray]:
    """The model inputs stored in a .npy (one input) or .npz file (one array per input, in file order)."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise click.BadParameter(f"cannot read '{path}' as a .npy / .npz file of arrays: {e}", param_hint=what) from e
    arrays = [loaded[k] for k in loaded.files] if hasattr(loaded, "files") else [loaded]
    return _checked(arrays, f"'{path}'", what)


def _checked(arrays: List[np.ndarray], source: str, what: str) -> List[np.ndarray]:
    if not arrays or any(a.ndim == 0 or len(a) == 0 for a in arrays):
        raise click.BadParameter(f"{source} holds no samples (each array needs a first, sample axis of length >= 1)",
                                 param_hint=what)
    if len({len(a) for a in arrays}) != 1:
        raise click.BadParameter(f"the arrays of {source} hold different sample counts {[len(a) for a in arrays]}",
                                 param_hint=what)
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]


def batches(arrays: Sequence[np.ndarray], batch_size: int, labels: bool = False,
            whole_only: bool = False) -> Callable[[], Any]:
    """A representative-dataset callable over the arrays (xquant's validation sets take (inputs, labels));
    `whole_only`: the last, partial batch left out (a model that takes one batch size only)."""
    def gen():
        end = len(arrays[0]) - (len(arrays[0]) % batch_size if whole_only else 0)
        for start in range(0, end, batch_size):
            inputs = [a[start:start + batch_size] for a in arrays]
            yield (inputs, None) if labels else inputs
    return gen


@dataclass(frozen=True)
class ImageOptions:
    """How image files become model inputs: resize (short side to `resize`, or exactly `size`), centre crop,
    then (pixels * scale - mean) / std per channel."""

    resize: Optional[int] = None
    size: Optional[Tuple[int, int]] = None  # (width, height)
    crop: Optional[int] = None
    scale: float = 1 / 255
    mean: Tuple[float, ...] = (0.0,)
    std: Tuple[float, ...] = (1.0,)
    grayscale: bool = False


# the usual presets: torchvision's ImageNet evaluation, Keras applications' [-1, 1] ("inception") and 0..255 inputs
PRESETS = {
    "imagenet": ImageOptions(resize=256, crop=224, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    "inception": ImageOptions(resize=342, crop=299, mean=(0.5,), std=(0.5,)),
    "unit": ImageOptions(),
    "raw": ImageOptions(scale=1.0),
}


def image_files(folder: str) -> List[Path]:
    root = Path(folder)
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise click.BadParameter(f"no images ({', '.join(IMAGE_SUFFIXES)}) in folder '{folder}'", param_hint="--data")
    return files


def _image(path: Path, options: ImageOptions) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as opened:
            img = opened.convert("L" if options.grayscale else "RGB")
    except (OSError, UnidentifiedImageError) as e:
        raise click.BadParameter(f"cannot read image '{path}': {e}", param_hint="--data") from None
    if options.size is not None:
        img = img.resize(options.size, Image.Resampling.BILINEAR)
    elif options.resize is not None:
        w, h = img.size
        factor = options.resize / min(w, h)
        img = img.resize((max(1, round(w * factor)), max(1, round(h * factor))), Image.Resampling.BILINEAR)
    if options.crop is not None:
        w, h = img.size
        if min(w, h) < options.crop:
            raise click.BadParameter(f"'{path}' is {w}x{h}, smaller than --crop {options.crop}: add --resize "
                                     f"{options.crop}", param_hint="--data")
        left, top = (w - options.crop) // 2, (h - options.crop) // 2
        img = img.crop((left, top, left + options.crop, top + options.crop))
    return np.asarray(img)


def load_images(folder: str, options: ImageOptions, channels_last: bool) -> np.ndarray:
    """Every image under `folder` (sorted by path), preprocessed, as one float32 array (N, C, H, W) or
    (N, H, W, C). Images of different sizes need --resize / --size / --crop (or a --preset)."""
    files = image_files(folder)
    first = _image(files[0], options)
    first_size = first.shape
    channels = 1 if first.ndim == 2 else first.shape[-1]
    mean = np.asarray(options.mean * (channels if len(options.mean) == 1 else 1), np.float32)
    std = np.asarray(options.std * (channels if len(options.std) == 1 else 1), np.float32)
    if len(mean) != channels or len(std) != channels:
        raise click.BadParameter(f"--mean / --std give {len(mean)} / {len(std)} values for {channels}-channel images",
                                 param_hint="--mean")
    h, w = first.shape[:2]
    out = np.empty((len(files), h, w, channels) if channels_last else (len(files), channels, h, w), np.float32)
    for i, path in enumerate(progress(files, "Reading images")):
        pixels = first if i == 0 else _image(path, options)
        if pixels.shape != first_size:
            raise click.BadParameter(
                f"images differ in size: '{files[0].name}' is {_wxh(first_size)}, '{path.name}' {_wxh(pixels.shape)}; "
                "give --resize N (short side) with --crop N, --size WxH, or --preset imagenet", param_hint="--data")
        x = pixels.reshape(h, w, channels).astype(np.float32)  # one image at a time: no full-size temporaries
        x *= np.float32(options.scale)
        x -= mean
        x /= std
        out[i] = x if channels_last else x.transpose(2, 0, 1)
    return out


def _wxh(shape: Tuple[int, ...]) -> str:
    return f"{shape[1]}x{shape[0]}"


def _as_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def load_batches(spec: str, param_hint: str) -> List[np.ndarray]:
    """The batches a 'module:callable' yields (each a tensor / array, or a list / tuple of one per input),
    concatenated per input."""
    source = load_callable(spec, param_hint)
    produced: Iterable[Any] = source() if callable(source) else source
    per_input: List[List[np.ndarray]] = []
    try:
        for batch in produced:
            items = list(batch) if isinstance(batch, (list, tuple)) else [batch]
            if not per_input:
                per_input = [[] for _ in items]
            if len(items) != len(per_input):
                raise click.BadParameter(f"'{spec}' yielded batches of {len(per_input)} and then {len(items)} inputs",
                                         param_hint=param_hint)
            for store, item in zip(per_input, items):
                store.append(_as_numpy(item))
    except TypeError as e:
        raise click.BadParameter(f"'{spec}' did not give an iterable of batches: {e}", param_hint=param_hint) from None
    try:
        arrays = [np.concatenate(parts) for parts in per_input]
    except ValueError as e:
        raise click.BadParameter(f"the batches of '{spec}' differ in shape beyond the batch axis: {e}",
                                 param_hint=param_hint) from None
    return _checked(arrays, f"'{spec}'", param_hint)


def load_data(spec: str, options: ImageOptions, channels_last: bool, param_hint: str = "--data") -> List[np.ndarray]:
    """One array per model input, samples on the first axis, from a folder of images, a .npy / .npz file or
    'module:callable' yielding batches."""
    if os.path.isdir(spec):
        return [load_images(spec, options, channels_last)]
    if spec.endswith((".npy", ".npz")):
        if not os.path.isfile(spec):
            raise click.BadParameter(f"no file at '{spec}'", param_hint=param_hint)
        return load_arrays(spec, param_hint)
    if is_callable_spec(spec):
        return load_batches(spec, param_hint)
    raise click.BadParameter(f"'{spec}' is not a folder of images, a .npy / .npz file or 'module:callable' yielding "
                             "batches" + ("" if os.path.exists(spec) else " (nothing exists at that path)"),
                             param_hint=param_hint)
