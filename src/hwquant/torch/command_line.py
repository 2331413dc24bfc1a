"""The command line's PyTorch adapter (contract: hwquant.cli.frameworks.CommandLineAdapter): read a model
file, run a model on numpy batches, export and read back the files the suffix of --out asks for."""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from hwquant.errors import HwquantError, UnsafeModelFileError

NAME = "pytorch"
CHANNELS_LAST = False
# what each --out suffix writes (the .pt file reloads with mct.exporter.load_quantized_model)
EXPORTS: Dict[str, str] = {".onnx": "ONNX (mct_quantizers ops for the IMX500; --format qdq for QuantizeLinear / "
                                    "DequantizeLinear)",
                           ".pt": "the quantized model, saved by hwquant (reload: mct.exporter.load_quantized_model)",
                           ".torchscript": "TorchScript with fake quantization"}


class ModelFileError(HwquantError, ValueError):
    """A model file that cannot be read as a PyTorch model (the message says what it holds and what to pass)."""


def is_model(obj: Any) -> bool:
    return isinstance(obj, torch.nn.Module)


def _is_torchscript(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.split("/", 1)[-1].startswith("code/") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def load_model(path: str, trust: bool = False) -> torch.nn.Module:
    """A float model from a file: an ONNX model (converted by onnx2torch), a torch.export program (.pt2),
    TorchScript (converted once the data is read: prepare_model), or a whole pickled module (torch.save(model,
    path)). Nothing in the file runs unless `trust` (hwquant.model_files): a pickle is read with
    torch.load(weights_only=True) and the torch.nn / torchvision / hwquant layer classes only, a .pt2 archive is
    checked first (UnsafeModelFileError otherwise); `trust=True` loads as torch does (runs the file's code)."""
    from hwquant.torch.model_files import load_exported_program, load_pickled_model

    if path.endswith(".onnx"):
        from hwquant.torch.capture.onnx_import import module_from_onnx
        return module_from_onnx(path)
    if path.endswith(".pt2"):
        try:
            program = load_exported_program(path, trust=trust)
        except UnsafeModelFileError:
            raise
        except Exception as e:  # a truncated or foreign file
            raise ModelFileError(f"'{path}' is not a readable torch.export program (.pt2 written by "
                                 f"torch.export.save): {type(e).__name__}: {e}") from None
        # no guard nodes: capture runs the graph in its own ways; a fixed batch is kept to (fixed_batch_size)
        return program.module(check_guards=False)
    if _is_torchscript(path):  # TorchScript's interpreter runs no Python: read as it is
        return torch.jit.load(path, map_location="cpu").eval()
    try:
        model = load_pickled_model(path, trust=trust)
    except UnsafeModelFileError:
        raise
    except Exception as e:
        raise ModelFileError(f"'{path}' is not a readable PyTorch file ({type(e).__name__}: {e})") from None
    if isinstance(model, dict) and str(model.get("format", "")).startswith("hwquant"):
        raise ModelFileError(f"'{path}' is a model quantized by hwquant already: pass the float model (use "
                             "`hwquant export` to write it in another format)")
    if not isinstance(model, torch.nn.Module):
        raise ModelFileError(f"'{path}' holds a {type(model).__name__}, not a torch.nn.Module (a state dict needs "
                             "its model class: pass 'package.module:function' returning the model instead)")
    return model.eval()


def prepare_model(model: Any, sample: Sequence[np.ndarray]) -> Tuple[Any, Optional[str]]:
    """The model hwquant quantizes, and a note where it was converted: a TorchScript model (no Python forward to
    capture) becomes a PyTorch module through ONNX, traced on `sample` (one batch of the data)."""
    if not isinstance(model, torch.jit.ScriptModule):
        return model, None
    from hwquant.torch.capture.onnx_import import module_from_torchscript
    converted = module_from_torchscript(model, [torch.from_numpy(np.ascontiguousarray(a)) for a in sample])
    return converted, "the TorchScript model was converted to a PyTorch module through ONNX (onnx2torch)"


def load_quantized(path: str, trust: bool = False) -> torch.nn.Module:
    """A model saved by hwquant: plain data and tensors, read with torch.load(weights_only=True) whatever `trust`."""
    from hwquant.torch.deployment.saved_model import load_quantized_model
    return load_quantized_model(path)


def _outputs(out: Any) -> List[np.ndarray]:
    """A model's outputs as float numpy arrays, in order (nested tuples / lists / dicts flattened)."""
    if isinstance(out, torch.Tensor):
        return [out.detach().cpu().float().numpy()]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in _outputs(o)]
    return []


def predict(model: Any, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    device = next((p.device for p in model.parameters()), torch.device("cpu")) if hasattr(model, "parameters") \
        else torch.device("cpu")
    with torch.no_grad():
        return _outputs(model(*[torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in inputs]))


def export(model: Any, path: str, representative_dataset: Callable[[], Any], fmt: str) -> Path:
    """Write `model` (quantized by hwquant) to `path` in the format its suffix names (EXPORTS)."""
    from hwquant.exporter import PytorchExportSerializationFormat as S
    from hwquant.exporter import QuantizationFormat as Q
    from hwquant.torch.deployment.exporter import pytorch_export_model
    from hwquant.torch.deployment.saved_model import save_quantized_model

    suffix = Path(path).suffix
    if suffix == ".pt":
        return save_quantized_model(model, path)
    quantization = {"mctq": Q.MCTQ, "qdq": Q.FAKELY_QUANT, "int8": Q.INT8}[fmt]
    if suffix == ".torchscript":
        quantization = Q.FAKELY_QUANT
    serialization = S.ONNX if suffix == ".onnx" else S.TORCHSCRIPT
    return pytorch_export_model(model, path, representative_dataset, serialization_format=serialization,
                                quantization_format=quantization)


def run_exported(path: str, inputs: Sequence[np.ndarray], trust: bool = False) -> List[np.ndarray]:
    """The outputs of an exported file run as deployed: ONNX in ONNX Runtime (MCTQ ops lowered to standard
    ones), TorchScript in torch.jit, a saved hwquant model rebuilt (none runs Python code from the file, whatever
    `trust`)."""
    if path.endswith(".onnx"):
        from hwquant.exporter.onnx_runtime import run_onnx
        return run_onnx(path, inputs)
    if path.endswith(".torchscript") or _is_torchscript(path):
        return predict(torch.jit.load(path, map_location="cpu"), inputs)
    return predict(load_quantized(path), inputs)


def quantized_layers(model: Any) -> List[str]:
    """The names of the layers whose weights the quantized model quantizes."""
    from mct_quantizers import PytorchQuantizationWrapper
    return [name for name, m in model.named_modules() if isinstance(m, PytorchQuantizationWrapper)]


def export_problem(suffix: str) -> Optional[str]:
    """Why this process cannot write a `suffix` file (said before any long work), or None."""
    import importlib.util
    if suffix == ".onnx" and not (importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxruntime")):
        return "ONNX export needs onnx and onnxruntime: pip install \"hwquant[onnx]\""
    return None


def fixed_batch_size(model: Any) -> Optional[int]:
    """The batch size a torch.export program was exported with, where it is fixed (its guards refuse any other
    size); None where the batch is free."""
    if not isinstance(model, torch.fx.GraphModule):
        return None
    sizes = set()
    for node in model.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            if not isinstance(value.shape[0], int):
                return None
            sizes.add(value.shape[0])
    return sizes.pop() if len(sizes) == 1 else None
