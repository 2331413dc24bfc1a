"""The rule for model files hwquant reads: no file runs code unless the user says it is trusted.

What each format can do when loaded, and what hwquant does about it (docs/guide/model-files.md):

- a pickled ``.pt`` / ``.pth`` module: a pickle runs whatever it names. Read with
  ``torch.load(weights_only=True)`` and an allowlist of layer classes (``hwquant.torch.model_files``);
  anything else it names is refused before it is read;
- ``.pt2`` (torch.export): its loader unpickles payloads, evaluates symbolic-shape expressions and
  can load compiled code; hwquant checks the archive first and reads only plain exported programs;
- TorchScript: run by TorchScript's own interpreter, which runs no Python: read as it is;
- Keras ``.keras`` / ``.h5``: a ``Lambda`` layer's Python bytecode is refused (Keras' safe mode);
- ONNX: holds no code, but its external-data locations could name any file: locations outside the
  model's folder are refused, trusted or not.

The trusted path (``--trust-model-file``, ``trust=True``) loads as the framework does without the
checks: a pickle's code runs. Framework-free: the frameworks' checks live in their packages; ONNX
(``onnx``) is imported on use.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, List, Sequence, Union

from hwquant.errors import UnsafeModelFileError

TRUST_FLAG = "--trust-model-file"
TRUST_HELP = ("Load model files as their framework does, with full pickle (and Keras' unsafe mode): this runs any "
              "code the file holds; use only for files you made or trust. Without it a file that asks to run code is "
              "refused.")
# the ways out a refusal names, by framework
TORCH_WAYS = ("save the model as a .pt2 (torch.export.save), TorchScript or ONNX file, or pass 'file.py:function' / "
              "'package.module:function' that builds it")
PT2_WAYS = ("export the model again with torch.export.save on this PyTorch, save it as TorchScript or ONNX, or pass "
            "'file.py:function' / 'package.module:function' that builds it")
KERAS_WAYS = ("rebuild that part with Keras layers or keras.ops (or a registered custom layer), or pass 'file.py:function' "
              "/ 'package.module:function' that builds the model")


def refusal(path: Any, problem: str, ways: str, in_python: str = "trust=True") -> UnsafeModelFileError:
    """The one-line error for a model file refused: what it asks for, and the ways out (`in_python`: the
    argument of the Python loader that trusts the file)."""
    return UnsafeModelFileError(f"'{path}' {problem}: hwquant runs no code from a model file unless told to; {ways}; "
                                f"or, only for a file you made or trust, pass {TRUST_FLAG} ({in_python} in Python)")


def names(items: Sequence[str], most: int = 6) -> str:
    """`items`, comma-separated, the first `most` of them."""
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


# ---- ONNX -------------------------------------------------------------------------------------------------------
def _graph_tensors(graph: Any) -> Iterator[Any]:
    """Every tensor of an ONNX graph or function that may hold its data externally: initializers (sparse ones too)
    and tensor attributes of nodes, in subgraphs (If / Loop / Scan bodies) too."""
    for tensor in getattr(graph, "initializer", ()):
        yield tensor
    for sparse in getattr(graph, "sparse_initializer", ()):
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _graph_tensors(attribute.g)
            for sub in attribute.graphs:
                yield from _graph_tensors(sub)


def _external_tensors(proto: Any) -> Iterator[Any]:
    import onnx

    for graph in [proto.graph, *proto.functions]:
        for tensor in _graph_tensors(graph):
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                yield tensor


def _outside(location: str, folder: str) -> bool:
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        return True
    if ".." in Path(location.replace("\\", "/")).parts:
        return True
    root = os.path.realpath(folder)  # and no link inside the folder that points out of it
    return os.path.commonpath([root, os.path.realpath(os.path.join(root, location))]) != root


def external_data_outside(proto: Any, folder: Union[str, os.PathLike]) -> List[str]:
    """The external-data locations of an ONNX model (read without its external data) that lie outside `folder`, the
    model file's folder: absolute paths, paths through '..', links out of the folder ('tensor -> location')."""
    found = []
    for tensor in _external_tensors(proto):
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if _outside(location, os.fspath(folder)):
            found.append(f"{tensor.name or '?'} -> {location!r}")
    return found


def check_onnx_external_data(proto: Any, folder: Union[str, os.PathLike], source: Any) -> None:
    """Refuse (UnsafeModelFileError) an ONNX model whose external data lies outside `folder`. Trusted or not: no
    model needs it, and ONNX Runtime refuses such files too."""
    outside = external_data_outside(proto, folder)
    if outside:
        raise UnsafeModelFileError(
            f"'{source}' names external data outside its folder ({names(outside, 3)}): loading it would read whatever "
            "file that names; keep a model's external data in its own folder (onnx.save_model(..., "
            "save_as_external_data=True, location='NAME.data'))")


def load_onnx(path: Union[str, os.PathLike]) -> Any:
    """An ONNX model file with its external data, read only once every external-data location is checked to lie in
    the model's folder (UnsafeModelFileError otherwise). Errors reading the file are onnx's own."""
    import onnx

    path = os.fspath(path)
    proto = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    check_onnx_external_data(proto, folder, path)
    if next(_external_tensors(proto), None) is not None:
        onnx.load_external_data_for_model(proto, folder)
    return proto
