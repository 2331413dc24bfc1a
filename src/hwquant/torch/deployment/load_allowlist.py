"""What a saved quantized model may name, and checks of what it holds, for `saved_model`'s loader.

Everything is an explicit allowlist; nothing is imported and nothing outside these lists is called:

- layer classes: the torch.nn layers below, by name (made with ``__new__``; no constructor runs);
- functions: pure tensor operations. Those of torch, torch.nn.functional, torch.Tensor, torch.fft,
  torch.linalg and torch.special are the
  ones torch itself declares as tensor operations (its ``__torch_function__``-overridable set, which
  holds no process-wide setter such as ``torch.set_default_dtype``), less those that run hooks or a
  callable they are handed, touch storage, devices, files or autograd (`_DENIED`); plus tensor
  factories (`FACTORIES`, whose literal sizes are bounded), ATen operators (public names), and
  listed operator / math / builtin functions.
- tensors: the shapes a layer's parameters and buffers must have given its recorded attributes
  (`check_layer_tensors`), so that a file cannot pair a layer with tensors of another shape.

The float models the command line reads as whole pickles (``torch.save(model)``, ``hwquant.torch.model_files``)
load with ``torch.load(weights_only=True)`` too, with the classes `model_class` allows: no function ever,
only nn.Module classes of torch.nn, torchvision's models and operators and hwquant's quantization layers,
every class of whose MRO lives in those packages (so that their ``__new__`` / ``__init__`` / ``__setstate__``,
all the code unpickling them can run, is that library code).
"""
from __future__ import annotations

import functools
import importlib
import math
import operator
import re
from typing import Any, Callable, Dict, FrozenSet, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import get_overridable_functions

LAYER_CLASSES = frozenset("""
    Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d Linear Bilinear Identity
    BatchNorm1d BatchNorm2d BatchNorm3d LayerNorm GroupNorm InstanceNorm1d InstanceNorm2d InstanceNorm3d
    LocalResponseNorm RMSNorm Embedding EmbeddingBag
    ReLU ReLU6 LeakyReLU PReLU ELU SELU CELU GELU SiLU Mish Hardswish Hardsigmoid Hardtanh Sigmoid Tanh
    Softmax LogSoftmax Softmin Softplus Softsign Tanhshrink Threshold LogSigmoid GLU Hardshrink Softshrink
    Dropout Dropout1d Dropout2d Dropout3d AlphaDropout Flatten Unflatten
    MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d
    AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d LPPool1d LPPool2d
    Upsample UpsamplingNearest2d UpsamplingBilinear2d PixelShuffle PixelUnshuffle ChannelShuffle
    ZeroPad1d ZeroPad2d ZeroPad3d ConstantPad1d ConstantPad2d ConstantPad3d ReflectionPad1d ReflectionPad2d
    ReflectionPad3d ReplicationPad1d ReplicationPad2d ReplicationPad3d CircularPad1d CircularPad2d
    LSTM GRU RNN LSTMCell GRUCell RNNCell MultiheadAttention
    Sequential ModuleList ModuleDict CosineSimilarity PairwiseDistance
""".split())

# Overridable tensor functions that run hooks or callables, reach raw storage, files, other
# processes or autograd, or resize memory in place: never needed by an inference graph.
_DENIED = frozenset("""
    register_hook register_post_accumulate_grad_hook apply_ map_ map2_ backward retain_grad requires_grad_
    storage untyped_storage share_memory_ pin_memory record_stream set_ resize_ resize_as_ data_ptr
    from_file save load module_load
""".split())

# Tensor factories (not overridable: they take no tensor), and the tensor methods that allocate by
# size: allowed with their literal sizes bounded.
FACTORIES = {f.__name__: f for f in (torch.zeros, torch.ones, torch.full, torch.empty, torch.arange,
                                     torch.linspace, torch.eye, torch.tensor, torch.as_tensor, torch.scalar_tensor)}
SIZED_METHODS = frozenset({"new_zeros", "new_ones", "new_full", "new_empty"})
MAX_FACTORY_ELEMENTS = 1 << 26  # 64 M elements: far above any constant a layer graph builds

_OPERATOR = frozenset("""
    add sub mul truediv floordiv mod pow neg pos abs matmul getitem setitem and_ or_ xor invert not_
    lt le eq ne gt ge iadd isub imul itruediv contains lshift rshift
""".split())
_MATH = frozenset("sqrt exp log log2 log10 pow floor ceil trunc fabs sin cos tan tanh erf pi e inf".split())
BUILTINS = {f.__name__: f for f in (getattr, len, int, float, slice)}
_NAME = re.compile(r"[A-Za-z_]\w*\Z")


@functools.lru_cache(maxsize=1)
def _tensor_operations() -> Dict[str, Callable]:
    """torch's own list of tensor operations, by the name the saver records."""
    table: Dict[str, Callable] = {}
    homes = {torch: "torch", F: "torch.nn.functional", torch.Tensor: "torch.Tensor", torch.fft: "torch.fft",
             torch.linalg: "torch.linalg", torch.special: "torch.special"}
    listed = {id(f) for functions in get_overridable_functions().values() for f in functions}
    for namespace, prefix in homes.items():
        for name in dir(namespace):  # by attribute name: some functions' __name__ differs (fft_rfft)
            fn = getattr(namespace, name, None)
            if id(fn) in listed and not name.startswith("_") and name not in _DENIED:
                table[f"{prefix}.{name}"] = fn
    table.update({f"torch.{n}": f for n, f in FACTORIES.items()})
    table.update({f"operator.{n}": getattr(operator, n) for n in _OPERATOR})
    table.update({f"math.{n}": getattr(math, n) for n in _MATH if callable(getattr(math, n))})
    table.update({f"builtins.{n}": f for n, f in BUILTINS.items()})
    table["torch._assert"] = torch._assert  # fx writes it for traced asserts
    return table


def resolve_function(name: Any) -> Optional[Callable]:
    """The allowed function recorded as `name`, or None."""
    if not isinstance(name, str):
        return None
    if name.startswith("torch.ops.aten."):
        parts = name.split(".")[3:]
        if not (1 <= len(parts) <= 2 and all(_NAME.match(p) and not p.startswith("_") for p in parts)
                and parts[0] not in _DENIED):
            return None
        obj = functools.reduce(lambda o, part: getattr(o, part, None), parts, torch.ops.aten)
        return obj if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) else None
    return _tensor_operations().get(name.replace("_operator.", "operator.", 1))


def function_name(fn: Any) -> Optional[str]:
    """The name the saver records for `fn` (None when `fn` is not allowed)."""
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        name = f"torch.ops.{fn}"
        return name if resolve_function(name) is fn else None
    return next((n for n, f in _tensor_operations().items() if f is fn), None)


def tensor_attribute(name: Any) -> bool:
    """A public torch.Tensor attribute (`shape`, `dtype`, a method) that `getattr` may read."""
    return isinstance(name, str) and bool(_NAME.match(name)) and not name.startswith("_") \
        and name not in _DENIED and hasattr(torch.Tensor, name)


def tensor_method(name: Any) -> bool:
    """A public tensor method a graph may call by name."""
    return isinstance(name, str) and f"torch.Tensor.{name}" in _tensor_operations()


def check_factory_sizes(fn: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
    """Refuse a tensor factory (a function, or a sized method by name with the tensor first in
    `args`) whose literal sizes exceed MAX_FACTORY_ELEMENTS."""
    if fn in SIZED_METHODS:
        fn, args = getattr(torch.Tensor, fn), args[1:]
    elif fn not in FACTORIES.values():
        return
    sizes = [a for a in list(args) + [kwargs.get("size")] if isinstance(a, int) and not isinstance(a, bool)]
    sizes += [d for a in args if isinstance(a, (tuple, list)) for d in a if isinstance(d, int)]
    if fn in (torch.arange, torch.linspace):
        count = max((abs(s) for s in sizes), default=0)
    else:
        count = math.prod(abs(s) for s in sizes) if sizes else 0
    if count > MAX_FACTORY_ELEMENTS:
        raise ValueError(f"{fn.__name__} of {count} elements (at most {MAX_FACTORY_ELEMENTS})")


def _expected_shapes(m: nn.Module) -> Dict[str, tuple]:
    """Parameter / buffer shapes implied by the recorded attributes of common layers."""
    d = vars(m)
    if isinstance(m, nn.modules.conv._ConvNd):
        k = tuple(d["kernel_size"])
        w = (d["in_channels"], d["out_channels"] // d["groups"]) if d["transposed"] else \
            (d["out_channels"], d["in_channels"] // d["groups"])
        return {"weight": w + k, "bias": (d["out_channels"],)}
    if isinstance(m, nn.Linear):
        return {"weight": (d["out_features"], d["in_features"]), "bias": (d["out_features"],)}
    if isinstance(m, nn.modules.batchnorm._NormBase):
        c = (d["num_features"],)
        return {"weight": c, "bias": c, "running_mean": c, "running_var": c, "num_batches_tracked": ()}
    if isinstance(m, nn.LayerNorm):
        s = tuple(d["normalized_shape"])
        return {"weight": s, "bias": s}
    if isinstance(m, nn.GroupNorm):
        return {"weight": (d["num_channels"],), "bias": (d["num_channels"],)}
    if isinstance(m, nn.Embedding):
        return {"weight": (d["num_embeddings"], d["embedding_dim"])}
    return {}


def check_layer_tensors(m: nn.Module, where: str) -> None:
    """Refuse a layer whose tensors do not have the shapes its attributes imply."""
    try:
        expected = _expected_shapes(m)
    except (KeyError, TypeError, ZeroDivisionError) as e:
        raise ValueError(f"{where}: malformed layer attributes ({type(e).__name__}: {e})") from None
    for name, shape in expected.items():
        t = m._parameters.get(name, m._buffers.get(name, m.__dict__.get(name)))  # (or a wrapper's float weight)
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{where}: '{name}' has shape {tuple(t.shape)}, but the layer's attributes imply {shape}")


def check_weight_quantizers(layer: nn.Module, quantizers: Dict[str, Any], where: str) -> None:
    """Refuse a per-channel weight quantizer whose channel count is not its weight's."""
    for name, q in quantizers.items():
        weight, axis = getattr(layer, name, None), getattr(q, "channel_axis", None)
        if not isinstance(weight, torch.Tensor) or axis is None:
            continue
        if not -weight.dim() <= axis < weight.dim():
            raise ValueError(f"{where}: the quantizer of '{name}' has channel axis {axis}, but the weight has "
                             f"{weight.dim()} dimensions")
        grid = q.grid()
        values = grid.threshold if hasattr(grid, "lut_values") else grid.scale
        count = values.numel() if isinstance(values, torch.Tensor) else np.size(values)
        if count not in (1, weight.shape[axis]):
            raise ValueError(f"{where}: the quantizer of '{name}' has {count} channels, the weight "
                             f"{weight.shape[axis]} along axis {axis}")


# ---- whole pickled modules (torch.save(model)) ----------------------------------------------------------------
# the packages whose nn.Module classes a whole-model pickle may name (importing them runs installed library code only)
MODEL_CLASS_PACKAGES = ("torch.nn.modules.", "torchvision.models.", "torchvision.ops.", "hwquant.torch.quantizers.",
                        "mct_quantizers.")
# where every class in an allowed class's MRO must live
_CLASS_HOMES = MODEL_CLASS_PACKAGES + ("builtins.", "typing.", "abc.")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")


def _lookup(name: str) -> Any:
    """The object `name` ('package.module.Qualname') names, importing only modules under MODEL_CLASS_PACKAGES."""
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        if not (module_name + ".").startswith(MODEL_CLASS_PACKAGES):
            continue
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError:  # not installed here, or not a module: try a shorter module path
            continue
        for part in parts[split:]:
            if part.startswith("__"):
                return None
            obj = getattr(obj, part, None)
        return obj
    return None


@functools.lru_cache(maxsize=None)
def model_class(name: Any) -> Optional[type]:
    """The class a whole-model pickle may build, named as pickle names it ('module.Qualname'), or None: an nn.Module
    subclass of a package of MODEL_CLASS_PACKAGES whose classes (its MRO) all live in those packages. Never a
    function: a pickle calls what it names."""
    if not isinstance(name, str) or not _DOTTED.match(name) or not name.startswith(MODEL_CLASS_PACKAGES):
        return None
    cls = _lookup(name)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)) or f"{cls.__module__}.{cls.__qualname__}" != name:
        return None  # a function, another kind of object, or a class re-exported under another name
    if not all((k.__module__ + ".").startswith(_CLASS_HOMES) for k in cls.__mro__):
        return None  # a base class from elsewhere: its code would run
    return cls


@functools.lru_cache(maxsize=1)
def torch_layer_classes() -> FrozenSet[type]:
    """Every torch.nn layer class `model_class` allows (for files whose names cannot be read before loading)."""
    found = set()
    for obj in vars(nn).values():
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            cls = model_class(f"{obj.__module__}.{obj.__qualname__}")
            if cls is not None:
                found.add(cls)
    return frozenset(found)
