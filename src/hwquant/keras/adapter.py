"""The Keras 3 framework adapter: the facts about Keras layers the core asks for (channels last,
kernels laid out HWIO / (in, out)), statistics collection on a float model with extra outputs, and
the quantized model built from the core graph.

The graph corrections' facts are in correction_facts.py (channels-last convolutions and dense layers;
transposed convolutions are left alone by the corrections); mixed-precision sensitivities are measured
(mixed_precision.py).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from keras import layers as L
from keras.src.ops import nn as NN
from keras.src.ops import numpy as NP

from hwquant.core.configuration.config import DefaultDict
from hwquant.core.graph.framework_adapter import BatchNormParams
from hwquant.core.configuration.framework_info import FrameworkInfo
from hwquant.core.graph.model_graph import Graph, Node, NodeKind
from hwquant.tpc.attachment import whole_table
from hwquant.core.pipeline.distributed import SINGLE_PROCESS
from hwquant.core.statistics.tensor_statistics import merge_chunks, summarize
from hwquant.keras.attach import OPSET_TO_LAYERS, attach_tpc
from hwquant.keras.builder import build_model
from hwquant.keras.inference import predict_on_batch
from hwquant.keras.correction_facts import _CONVS, _DEPTHWISE, _TRANSPOSED, KERNEL_LAYERS, KerasCorrectionFacts

# Samples per statistics pass: the observing model returns every observed activation of them at once.
STATISTICS_CHUNK = 8

DEFAULT_KERAS_INFO = FrameworkInfo(
    activation_quantizer_mapping={},
    # (output-channel axis, input-channel axis) of each kernel: HWIO convolutions, (kh, kw, in, multiplier)
    # depthwise, (kh, kw, out, in) transposed, (in, out) dense
    kernel_channels_mapping=DefaultDict({**{c: (-1, -2) for c in _CONVS}, **{c: (-2, -1) for c in _DEPTHWISE},
                                         **{c: (-2, -1) for c in _TRANSPOSED}, L.Dense: (1, 0)}, None),
    # Output ranges (min, max). A range known at both ends fixes the activation's grid (core/statistics/parameter_search.py): the
    # squashing functions'. ReLU6 is given as (0, None), as in MCT: its cap is a clip whose threshold is better
    # searched (fixing [0, 6], threshold 8, cost MobileNetV2 1.3 dB). Layers and keras.ops functions by type; an
    # Activation layer by its activation's name, a ReLU layer by its configuration (output_range).
    activation_min_max_mapping={"relu": (0, None), "relu6": (0, None), "sigmoid": (0, 1), "softmax": (0, 1),
                                "tanh": (-1, 1), "hard_sigmoid": (0, 1)},
    layer_min_max_mapping={L.Softmax: (0, 1), NN.Softmax: (0, 1), NN.Sigmoid: (0, 1), NN.HardSigmoid: (0, 1),
                           NN.Relu6: (0, None), NN.Relu: (0, None), NP.Tanh: (-1, 1)},
    kernel_ops_attributes_mapping=DefaultDict({c: ["kernel"] for c in KERNEL_LAYERS}, [None]),
    out_channel_axis_mapping=DefaultDict({}, -1),
)


def _einsum_kernel_axes(equation: str) -> Optional[Tuple[int, int]]:
    """(output-channel axis, input-channel axis) of an EinsumDense kernel: the kernel's axes named by the
    output's and the input's last letters ('abc,cde->abde': (2, 0)); None when the equation has no such axes."""
    try:
        inputs, output = equation.replace(" ", "").split("->")
        source, kernel = inputs.split(",")
    except ValueError:
        return None
    if not source or not output or output[-1] not in kernel or source[-1] not in kernel:
        return None
    return kernel.index(output[-1]), kernel.index(source[-1])


_WHOLE_TABLE = whole_table(OPSET_TO_LAYERS)  # what kind of operation a layer is, whatever the TPC


class KerasAdapter(KerasCorrectionFacts):
    name = "keras"
    activation_channel_axis = -1  # channels last

    collective = SINGLE_PROCESS  # (Keras runs in one process)

    def __init__(self, graph: Optional[Graph] = None, fw_info: FrameworkInfo = DEFAULT_KERAS_INFO):
        self.graph = graph  # the graph being quantized: the corrections' facts read its input shapes
        self.fw_info = fw_info

    # ---- the TPC and layer facts ----------------------------------------------------------------
    def attach(self, tpc: Any, custom_opset_to_layer: Optional[Dict[str, Any]] = None) -> Any:
        return attach_tpc(tpc, custom_opset_to_layer)

    def kernel_attr(self, node: Node) -> Optional[str]:
        known = node.kind == NodeKind.MODULE and isinstance(node.type, type) and issubclass(node.type, KERNEL_LAYERS)
        return "kernel" if known else None

    def bias_attr(self, node: Node) -> Optional[str]:
        # an EinsumDense's bias spans the axes its equation names: no batch norm folds into it
        return "bias" if self.kernel_attr(node) is not None and node.type is not L.EinsumDense else None

    def kernel_axes(self, node: Node) -> Optional[Tuple[int, int]]:
        attr = self.kernel_attr(node)
        if attr is None or attr not in node.weights:
            return None
        if node.type is L.EinsumDense:
            return _einsum_kernel_axes(node.framework_attr.get("equation", ""))
        rank = np.ndim(node.weights[attr])
        out, inp = self.fw_info.get_kernel_channels(node.type)
        return out % rank, inp % rank

    def matrix_weights(self, node: Node) -> Dict[Any, int]:
        if node.kind != NodeKind.MODULE or not isinstance(node.type, type):
            return {}
        if issubclass(node.type, (L.RNN, L.Bidirectional)):  # (in, units * gates) kernels, recurrent kernels
            return {k: 1 for k, w in node.weights.items()
                    if str(k).split("#")[0] in ("kernel", "recurrent_kernel") and np.ndim(w) == 2}
        if issubclass(node.type, L.Embedding):  # (tokens, dims): a dims-wide one-hot product
            return {"embeddings": 1} if "embeddings" in node.weights else {}
        return {}

    def operator_set(self, node: Node) -> Optional[str]:
        entry = _WHOLE_TABLE.find(node.type, node.framework_attr) if node.kind != NodeKind.INPUT else None
        return entry.name if entry else None

    def batch_norm_params(self, node: Node) -> Optional[BatchNormParams]:
        if node.kind != NodeKind.MODULE or node.type is not L.BatchNormalization:
            return None
        cfg, w = node.framework_attr, node.weights
        if cfg.get("axis") not in (-1, len(node.output_shape) - 1):
            return None  # folds into a kernel's output channels: channels-last only
        mean = w["moving_mean"]
        return BatchNormParams(gamma=w.get("gamma", np.ones_like(mean)), beta=w.get("beta", np.zeros_like(mean)),
                               mean=mean, var=w["moving_variance"], eps=float(cfg.get("epsilon", 1e-3)))

    def canonical_kernel(self, node: Node, kernel: np.ndarray) -> np.ndarray:
        rank = np.ndim(kernel)
        if node.type is L.Dense:
            return np.swapaxes(kernel, 0, 1)
        if issubclass(node.type, _DEPTHWISE):  # (*k, in, mult) -> (in * mult, 1, *k): groups = in
            moved = np.moveaxis(kernel, (rank - 2, rank - 1), (0, 1))
            return moved.reshape(-1, 1, *moved.shape[2:])
        return np.moveaxis(kernel, (rank - 1, rank - 2), (0, 1))  # (*k, a, b) -> (b, a, *k)

    def framework_kernel(self, node: Node, kernel: np.ndarray) -> np.ndarray:
        rank = np.ndim(kernel)
        if node.type is L.Dense:
            return np.swapaxes(kernel, 0, 1)
        if issubclass(node.type, _DEPTHWISE):
            channels = node.weights[self.kernel_attr(node)].shape[-2]
            grouped = kernel.reshape(channels, -1, *kernel.shape[2:])
            return np.moveaxis(grouped, (0, 1), (rank - 2, rank - 1))
        return np.moveaxis(kernel, (0, 1), (rank - 1, rank - 2))

    def is_zero_padding(self, node: Node) -> bool:
        return node.kind == NodeKind.MODULE and node.type in (L.ZeroPadding1D, L.ZeroPadding2D, L.ZeroPadding3D)

    def output_range(self, node: Node) -> Optional[Tuple[Optional[float], Optional[float]]]:
        if node.kind == NodeKind.MODULE and node.type is L.Activation:
            name = node.framework_attr.get("activation")
            return self.fw_info.get_activation_min_max(name) \
                if isinstance(name, str) and self.fw_info.activation_has_min_max(name) else None
        if node.kind == NodeKind.MODULE and node.type is L.ReLU:  # as "relu" / "relu6"; a leaky or shifted one: unknown
            return None if self.activation_info(node) is None else self.fw_info.get_activation_min_max("relu")
        known = node.kind in (NodeKind.MODULE, NodeKind.FUNCTION)
        return self.fw_info.layer_output_range(node.type) if known else None

    def sensitivity_backend(self) -> Any:
        from hwquant.keras.mixed_precision import KerasSensitivityBackend
        return KerasSensitivityBackend()

    # ---- running and building --------------------------------------------------------------------
    def collect_statistics(self, graph: Graph, statistics: Dict[str, Any], data: Iterable[List[Any]],
                           quantized: bool = False) -> int:
        if quantized:
            raise NotImplementedError("statistics of the quantized Keras model are not collected")
        names = list(statistics)
        model = build_model(graph, extra_outputs=names)
        batches = 0
        for batch in data:  # predict_on_batch: inference only (no gradient graph on any backend), numpy out
            n, chunks = len(batch[0]), {name: [] for name in names}
            for start in range(0, n, STATISTICS_CHUNK):  # every activation of a chunk is held at once
                chunk = [a[start:start + STATISTICS_CHUNK] for a in batch]
                _, values = predict_on_batch(model, chunk if len(chunk) > 1 else chunk[0])
                for name, value in zip(names, values):
                    chunks[name].append(summarize(np.asarray(value, np.float32), statistics[name], precise=False,
                                                  rows_of=(start, n)))
            for name in names:  # one summary per batch, as every framework gives: the same histogram samples
                statistics[name].add(merge_chunks(chunks[name]))
            batches += 1
        return batches

    def build(self, graph: Graph, quantized: bool) -> Any:
        from hwquant.keras.quantized_model import build_quantized_model
        return build_quantized_model(graph) if quantized else build_model(graph)

    def fake_quantized_model(self, graph: Graph) -> Any:
        return self.build(graph, quantized=True)

    def node_runner(self, graph: Graph) -> Any:
        from hwquant.keras.quantized_model import NodeRunner
        return NodeRunner(graph)

    def relative_output_errors(self, reference: Any, models: Sequence[Any], data: Iterable[List[Any]],
                               max_samples: int) -> List[float]:
        energy, errors, seen = 0.0, [0.0] * len(models), 0
        for batch in data:
            if seen >= max_samples:
                break
            x = batch if len(batch) > 1 else batch[0]
            ref = _run_once(reference, x)
            energy += sum(float((r ** 2).sum()) for r in ref)
            for k, m in enumerate(models):
                out = _run_once(m, x)
                errors[k] += sum(float(((o - r) ** 2).sum()) for o, r in zip(out, ref))
            seen += len(batch[0])
        return [e / energy if energy > 0 else e for e in errors]


def _flat_outputs(out: Any) -> List[Any]:
    """A model's outputs in a fixed order: lists / tuples in order, dicts by sorted key (as keras.tree)."""
    if isinstance(out, dict):
        return [leaf for k in sorted(out) for leaf in _flat_outputs(out[k])]
    if isinstance(out, (list, tuple)):
        return [leaf for o in out for leaf in _flat_outputs(o)]
    return [out]


def _run_once(model: Any, x: Any) -> List[np.ndarray]:
    """A model's outputs on one batch, each as float64 numpy (several outputs may differ in shape: an
    O-Net's 2, 4 and 10 wide heads): predict_on_batch (inference only; no gradient graph on the torch
    backend). On TensorFlow an eager call looks cheaper in a warm process but costs more in a
    quantization's first run (each eager kernel set up once per shape: MobileNetV2 PTQ 12.3 s against 8.8 s)."""
    return [np.asarray(o, np.float64) for o in _flat_outputs(predict_on_batch(model, x))]
