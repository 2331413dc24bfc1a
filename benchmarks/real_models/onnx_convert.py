"""The models shipped only as ONNX (ONNX_MODELS: PP-OCRv4's DBNet detector and SVTR-LCNet recogniser from PyPI
rapidocr-onnxruntime 1.4.4, ddddocr 1.6.1's YOLOX character detector), converted to PyTorch by onnx2torch after
preparing the file. onnx2torch's modules read shapes and parameters from tensor values, so torch.fx and
torch.export fail on them; hwquant captures them by tracing the real inputs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from .common import _need


RAPIDOCR_DIR = "rapidocr-onnxruntime/rapidocr_onnxruntime/models"
ONNX_MODELS = {  # name: (file under .cache/assets/real, the (1, C, H, W) input it is converted and fed at)
    "ppocr_det_dbnet": (f"{RAPIDOCR_DIR}/ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)),
    "ppocr_rec_svtr": (f"{RAPIDOCR_DIR}/ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "ddddocr_det_yolox": ("ddddocr/ddddocr/common_det.onnx", (1, 3, 416, 416)),
}


def import_onnx2torch():
    """onnx2torch, installed with --no-deps (its wheel requires torchvision, which this project keeps out of
    .venv): hwquant's loader puts a stand-in for torchvision in place while it loads."""
    from hwquant.torch.capture.onnx_import import import_onnx2torch as load
    return load()


def _prepared_onnx(path: Path, input_shape: tuple, free_batch: bool):
    """The ONNX model as onnx2torch can convert it: weights written as Constant nodes (paddle2onnx) made
    initializers, every tensor's shape known (measured by running the file once in ONNX Runtime: onnx2torch
    reads ranks, e.g. a BatchNorm's, and ONNX's shape inference stops at shapes computed at run time), and,
    with `free_batch`, the exported batch of 1 in Reshape targets made 0 (ONNX: the input's size)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    from hwquant.torch.capture.onnx_import import constants_as_initializers
    m = onnx.load(str(path))
    constants_as_initializers(m)
    inits = {i.name: i for i in m.graph.initializer}
    if free_batch:
        for n in m.graph.node:
            if n.op_type == "Reshape" and n.input[1] in inits:
                shape = numpy_helper.to_array(inits[n.input[1]]).copy()
                if shape.ndim == 1 and len(shape) and shape[0] == 1:
                    shape[0] = 0
                    inits[n.input[1]].CopyFrom(numpy_helper.from_array(shape, n.input[1]))
    known = {v.name for v in list(m.graph.input) + list(m.graph.output)} | set(inits)
    missing = [o for n in m.graph.node for o in n.output if o and o not in known]
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in missing)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = sess.run(missing, {m.graph.input[0].name: np.zeros(input_shape, np.float32)})
    del m.graph.value_info[:]
    m.graph.value_info.extend(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                              for name, v in zip(missing, values))
    return m


def prepared_onnx(name: str):
    """The ONNX model one of ONNX_MODELS is converted from (YOLOX with its batch made free): also what
    benchmarks/run_real_models.py hands ONNX Runtime's quantizer."""
    rel, shape = ONNX_MODELS[name]
    return _prepared_onnx(_need(rel), shape, free_batch=name == "ddddocr_det_yolox")


def onnx2torch_model(name: str) -> nn.Module:
    """The onnx2torch conversion of one of ONNX_MODELS."""
    return import_onnx2torch().convert(prepared_onnx(name)).eval()
