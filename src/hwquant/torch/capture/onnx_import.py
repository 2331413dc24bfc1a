"""ONNX files, and TorchScript through ONNX, as PyTorch modules hwquant can quantize (the command line's MODEL).

onnx2torch converts an ONNX graph to a torch.fx module whose layers read shapes and parameters from tensor
values; hwquant captures such a module by tracing the representative inputs (concrete_route.py). A TorchScript
file keeps no Python forward to capture: it is exported to ONNX first (torch's TorchScript-based exporter takes
script modules), with its batch axis left free.
"""
from __future__ import annotations

import io
import os
import sys
import types
from typing import Any, Sequence

import torch

from hwquant.concurrency import FRAMEWORK_STATE
from hwquant.errors import HwquantError, UnsafeModelFileError


class OnnxImportError(HwquantError, ValueError):
    """An ONNX or TorchScript model that could not become a PyTorch module (the message says why and what to do)."""


def import_onnx2torch() -> Any:
    """onnx2torch. Its wheel requires torchvision, which it imports when it loads for its NMS and RoIAlign
    converters only: where torchvision is not installed, a stand-in whose functions refuse is put in place while
    it loads, then removed."""
    try:
        import onnx2torch
        return onnx2torch
    except ImportError as e:
        if "torchvision" not in str(e):
            raise OnnxImportError(f"ONNX and TorchScript models need onnx2torch ({e}): pip install onnx2torch "
                                  "(with --no-deps where its torchvision requirement would replace your torch)") \
                from None

    def missing(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("torchvision is not installed: onnx2torch's NMS and RoIAlign are unavailable")
    stub, ops = types.ModuleType("torchvision"), types.ModuleType("torchvision.ops")
    ops.nms = ops.box_convert = ops.roi_align = missing  # type: ignore[attr-defined]
    stub.ops = ops  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in ("torchvision", "torchvision.ops")}
    sys.modules.update({"torchvision": stub, "torchvision.ops": ops})
    try:
        import onnx2torch
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return onnx2torch


def module_from_onnx(model: Any) -> torch.nn.Module:
    """The PyTorch module of an ONNX model (a path or a ModelProto), shapes inferred first (onnx2torch reads
    ranks), in eval mode."""
    import onnx

    from hwquant.model_files import check_onnx_external_data, load_onnx
    try:
        if isinstance(model, onnx.ModelProto):
            check_onnx_external_data(model, os.getcwd(), "the ONNX model given")
            proto = model
        else:
            proto = load_onnx(model)  # external data outside the model's folder refused
        proto = onnx.shape_inference.infer_shapes(proto)
    except UnsafeModelFileError:
        raise
    except Exception as e:  # noqa: BLE001 - protobuf's decode errors and the checker's
        raise OnnxImportError(f"not a readable ONNX model: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    constants_as_initializers(proto)
    try:
        return import_onnx2torch().convert(proto).eval()
    except OnnxImportError:
        raise
    except Exception as e:  # noqa: BLE001 - an operator onnx2torch has no converter for, said in one line
        raise OnnxImportError(f"onnx2torch cannot convert this ONNX model: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None


def constants_as_initializers(proto: Any) -> None:
    """Constant nodes holding a tensor become initializers, in place (onnx2torch converts Constant only at some
    opsets; exporters write weights and shape vectors either way, paddle2onnx its weights)."""
    import onnx
    kept = []
    for node in proto.graph.node:
        if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            proto.graph.initializer.append(tensor)
        else:
            kept.append(node)
    del proto.graph.node[:]
    proto.graph.node.extend(kept)


def module_from_torchscript(script: torch.jit.ScriptModule, sample: Sequence[torch.Tensor]) -> torch.nn.Module:
    """The PyTorch module of a TorchScript model, through ONNX (traced on `sample`, the batch axis free)."""
    buffer = io.BytesIO()
    names = [f"input_{i}" for i in range(len(sample))]
    try:
        with FRAMEWORK_STATE.exclusive, torch.no_grad():  # (torch.onnx's state is process-wide: concurrency.py)
            torch.onnx.export(script, tuple(sample), buffer, input_names=names, opset_version=17, dynamo=False,
                              dynamic_axes={n: {0: "batch"} for n in names})
    except Exception as e:  # noqa: BLE001 - torch's exporter refusing an operator
        raise OnnxImportError(f"the TorchScript model could not be exported to ONNX on the way to a PyTorch module: "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    import onnx
    return module_from_onnx(onnx.load_from_string(buffer.getvalue()))
