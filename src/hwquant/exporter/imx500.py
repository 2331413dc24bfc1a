"""What Sony's IMX500 converter (imxconv-pt 3.19) accepts in an MCTQ ONNX file, checked at export
time so that what the converter would refuse is named before anyone runs it, with the reason and
the way out (the exporter logs it as a warning and still writes the file).

The facts below are the converter's own: its operator table, the ONNX opsets and TPC minor versions
it reads, and that its quantization nodes are the power-of-two activation quantizer and the
power-of-two / symmetric / lookup-table weight quantizers of mct_quantizers. Subgraphs that only
compute shapes (from a Shape node) are folded by the converter before its operator check, so only
operators on the data path count.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import onnx

# ONNX opsets the converter reads; Gelu (one operator) exists from 20, before it torch writes Erf.
OPSETS = range(15, 21)
GELU_OPSET = 20
MAX_TPC_MINOR_VERSION = 6

SUPPORTED_OPS = frozenset("""
    Abs Add ArgMax AveragePool BatchNormalization Cast Clip Concat Constant Conv ConvTranspose Cos Div
    Dropout Equal Exp Expand Flatten Gather GatherElements Gelu Gemm GlobalAveragePool GroupNormalization
    HardSigmoid HardSwish Identity InstanceNormalization LayerNormalization LeakyRelu MatMul Max MaxPool Min
    Mul Neg Pad Pow ReduceL2 ReduceMax ReduceMean ReduceSum Relu Reshape Resize Sigmoid Sin Slice Softmax
    Split Sqrt Squeeze Sub Tanh TopK Transpose Unsqueeze
    ActivationPOTQuantizer WeightsPOTQuantizer WeightsSymmetricQuantizer WeightsLUTSymmetricQuantizer
    WeightsLUTPOTQuantizer
    MultiClassNMS MultiClassNMSWithIndices MultiClassNMSOBB FasterRCNNBoxDecode
""".split())  # the last line: Sony's edge-mdt-cl layers, made for this converter (Ultralytics' NMS layer)

_WHY = {
    "Erf": "GELU written with Erf below opset 20: export with onnx_opset_version=20 (or leave it unset), "
           "where GELU is one Gelu operator",
    "ActivationSymmetricQuantizer": "the chip's activations are power-of-two quantized: quantize with an "
                                    "IMX500 TPC",
    "ActivationUniformQuantizer": "the chip's activations are power-of-two quantized: quantize with an IMX500 TPC",
    "WeightsUniformQuantizer": "the chip's kernels are symmetric or power-of-two: quantize with an IMX500 TPC",
}


def _data_nodes(graph: onnx.GraphProto) -> List[onnx.NodeProto]:
    """The nodes that read, directly or not, a model input through something other than its shape."""
    data: Set[str] = {i.name for i in graph.input}
    nodes = []
    for node in graph.node:  # ONNX graphs are topologically sorted
        if node.op_type != "Shape" and any(name in data for name in node.input):
            nodes.append(node)
            data.update(node.output)
    return nodes


def converter_problems(proto: onnx.ModelProto, tpc_minor_version: Optional[str] = None) -> List[str]:
    """Why the IMX500 converter would refuse `proto` (empty when nothing known stands in the way)."""
    problems = []
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset not in OPSETS:
        problems.append(f"ONNX opset {opset}: the converter reads opsets {OPSETS.start} to {OPSETS.stop - 1}")
    if tpc_minor_version is not None and str(tpc_minor_version).isdigit() \
            and int(tpc_minor_version) > MAX_TPC_MINOR_VERSION:
        problems.append(f"TPC minor version {tpc_minor_version}: the converter knows versions up to "
                        f"{MAX_TPC_MINOR_VERSION}")
    unsupported: Dict[str, List[str]] = {}  # op type -> its nodes' names
    for node in _data_nodes(proto.graph):
        if node.op_type not in SUPPORTED_OPS:
            unsupported.setdefault(node.op_type, []).append(node.name or node.output[0])
    for op, names in sorted(unsupported.items()):
        where = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        problems.append(f"operator {op} ({where}) is not supported by the chip"
                        + (f": {_WHY[op]}" if op in _WHY else ""))
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value != 1:
            problems.append(f"input '{value.name}' has a fixed batch of {dims[0].dim_value}: the converter takes "
                            "batch 1 or a dynamic batch")
    return problems


def uses_erf(proto: onnx.ModelProto) -> bool:
    return any(node.op_type == "Erf" for node in proto.graph.node)
