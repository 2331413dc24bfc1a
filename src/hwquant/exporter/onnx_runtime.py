"""Run exported files in plain ONNX Runtime. An MCTQ file's ``mct_quantizers`` ops are rewritten to
standard QuantizeLinear / DequantizeLinear on load (no custom-op library needed)."""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Union

import numpy as np
import onnx

from hwquant.errors import ExportError, UnsafeModelFileError
from hwquant.exporter.onnx_lowering import lower_mctq_to_qdq
from hwquant.model_files import check_onnx_external_data, load_onnx

ModelLike = Union[str, os.PathLike, bytes, onnx.ModelProto]


def _load(model: ModelLike) -> onnx.ModelProto:
    """A copy of the model (lowering edits in place); a file read with its external data only where that lies in the
    file's folder, a model in memory only without external data elsewhere (UnsafeModelFileError)."""
    try:
        if not isinstance(model, (onnx.ModelProto, bytes)):
            return load_onnx(model)
        proto = onnx.ModelProto.FromString(model if isinstance(model, bytes) else model.SerializeToString())
        check_onnx_external_data(proto, os.getcwd(), "the ONNX model given")
        return proto
    except UnsafeModelFileError:
        raise
    except FileNotFoundError:
        raise ExportError(f"no ONNX file at '{model!s}'") from None
    except Exception as e:  # protobuf's DecodeError and friends
        raise ExportError(f"'{model if not isinstance(model, bytes) else 'the bytes given'}' is not a readable "
                          f"ONNX model ({type(e).__name__}: {e})") from None


def lower_mctq(model: ModelLike) -> onnx.ModelProto:
    """The model with its ``mct_quantizers`` ops as standard ONNX (a new ModelProto)."""
    return lower_mctq_to_qdq(_load(model))


def mctq_inference_session(model: ModelLike, sess_options: Any = None,
                           providers: Optional[Sequence[str]] = None) -> Any:
    """An ``onnxruntime.InferenceSession`` of an MCTQ (or plain QDQ) file, on the CPU unless
    ``providers`` says otherwise."""
    import onnxruntime as ort

    proto = lower_mctq(model)
    return ort.InferenceSession(proto.SerializeToString(), sess_options=sess_options,
                                providers=list(providers or ["CPUExecutionProvider"]))


def run_onnx(model: ModelLike, inputs: Sequence[Any]) -> List[np.ndarray]:
    """Every output of an ONNX file (MCTQ or plain) run in ONNX Runtime on the CPU, as float32 arrays; `inputs` in
    the graph's input order."""
    session = mctq_inference_session(model)
    names = [i.name for i in session.get_inputs()]
    return [np.asarray(o, dtype=np.float32) for o in session.run(None, dict(zip(names, inputs)))]
