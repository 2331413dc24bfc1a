"""The PyTorch adapter of the core pipeline (see core/graph/framework_adapter.py), and PyTorch's default
FrameworkInfo."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hwquant.core.configuration.config import DefaultDict
from hwquant.core.graph.framework_adapter import BatchNormParams
from hwquant.core.configuration.framework_info import FrameworkInfo
from hwquant.core.graph.model_graph import Graph, Node, NodeKind
from hwquant.tpc.attachment import whole_table
from hwquant.tpc.enums import OperatorSetNames
from hwquant.torch.attach import OPSET_TO_LAYERS, attach_tpc
from hwquant.torch.builder import QuantizerFactory, build_module
from hwquant.torch.correction_facts import _CONVS, _TRANSPOSED, PytorchCorrectionFacts  # graph-correction facts (core/passes)
from hwquant.torch.data import RepresentativeDataError
from hwquant.torch.statistics import summarize_tensor

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)

DEFAULT_PYTORCH_INFO = FrameworkInfo(
    kernel_ops=[*_CONVS, *_TRANSPOSED, nn.Linear],
    activation_ops=[nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Hardswish, nn.Hardsigmoid,
                    nn.GELU, nn.PReLU, nn.Softmax, F.relu, F.relu6, torch.relu, torch.sigmoid, torch.tanh],
    no_quantization_ops=[],
    activation_quantizer_mapping={},
    weights_quantizer_mapping={},
    # (output-channel axis, input-channel axis) of each kernel
    kernel_channels_mapping=DefaultDict({**{c: (0, 1) for c in _CONVS}, **{c: (1, 0) for c in _TRANSPOSED},
                                         nn.Linear: (0, 1)}, None),
    # Output ranges (min, max). A range known at both ends fixes the activation's grid (core/statistics/parameter_search.py): the
    # squashing functions'. ReLU6 is given as (0, None), as in MCT: its cap is a clip whose threshold is better
    # searched (fixing [0, 6], threshold 8, cost MobileNetV2 1.3 dB). Modules, functions and tensor methods (a
    # method node's type is the torch.Tensor method).
    activation_min_max_mapping={"relu": (0, None), "relu6": (0, None), "sigmoid": (0, 1), "tanh": (-1, 1),
                                "softmax": (0, 1), "hardsigmoid": (0, 1)},
    layer_min_max_mapping={nn.ReLU: (0, None), nn.ReLU6: (0, None), nn.Sigmoid: (0, 1), nn.Tanh: (-1, 1),
                           nn.Softmax: (0, 1), nn.Hardsigmoid: (0, 1), torch.relu: (0, None), F.relu: (0, None),
                           F.relu6: (0, None), torch.sigmoid: (0, 1), F.sigmoid: (0, 1), torch.tanh: (-1, 1),
                           F.tanh: (-1, 1), F.softmax: (0, 1), torch.softmax: (0, 1), F.hardsigmoid: (0, 1),
                           torch.Tensor.relu: (0, None), torch.Tensor.sigmoid: (0, 1), torch.Tensor.tanh: (-1, 1),
                           torch.Tensor.softmax: (0, 1)},
    kernel_ops_attributes_mapping=DefaultDict({c: ["weight"] for c in (*_CONVS, *_TRANSPOSED, nn.Linear)}, [None]),
    # activations are channels-first, except a Linear's (last axis)
    out_channel_axis_mapping=DefaultDict({nn.Linear: -1}, 1),
)


_WHOLE_TABLE = whole_table(OPSET_TO_LAYERS)  # what kind of operation a layer is, whatever the TPC


class PytorchAdapter(PytorchCorrectionFacts):
    name = "pytorch"
    activation_channel_axis = 1  # channels first

    @property
    def collective(self) -> Any:
        """The ranks of an initialised torch.distributed run (created on first use, which the pipeline
        makes on every rank at the same point), else the single process."""
        from hwquant.torch.distributed import collective
        return collective()

    def __init__(self, device: Optional[torch.device] = None, fw_info: FrameworkInfo = DEFAULT_PYTORCH_INFO):
        self.device = device or torch.device("cpu")
        self.fw_info = fw_info

    def attach(self, tpc: Any, custom_opset_to_layer: Optional[Dict[str, Any]] = None) -> Any:
        return attach_tpc(tpc, custom_opset_to_layer)

    def operator_set(self, node: Node) -> Optional[str]:
        if node.call_target is getattr and node.call_args[1:] == ("shape",):  # x.shape, traced as getattr
            return OperatorSetNames.SHAPE.value
        entry = _WHOLE_TABLE.find(node.type, node.framework_attr) if node.kind != NodeKind.INPUT else None
        return entry.name if entry else None

    def batch_norm_params(self, node: Node) -> Optional[BatchNormParams]:
        if node.kind != NodeKind.MODULE or not issubclass(node.type, _BATCH_NORMS):
            return None
        w = node.weights
        if "running_mean" not in w or "running_var" not in w:
            return None  # a batch-norm without running statistics normalises per batch: not foldable
        n = w["running_mean"].shape[0]
        return BatchNormParams(gamma=w.get("weight", np.ones(n, np.float32)), beta=w.get("bias", np.zeros(n, np.float32)),
                               mean=w["running_mean"], var=w["running_var"], eps=float(node.call_target.eps))

    def is_zero_padding(self, node: Node) -> bool:
        if node.kind == NodeKind.MODULE:
            m = node.call_target
            return isinstance(m, nn.modules.padding._ConstantPadNd) and float(m.value) == 0.0
        return node.kind == NodeKind.FUNCTION and node.type is F.pad and self.commutes_with_channel_scale(node)

    def output_range(self, node: Node) -> Optional[Tuple[Optional[float], Optional[float]]]:
        known = node.kind in (NodeKind.MODULE, NodeKind.FUNCTION, NodeKind.METHOD)
        return self.fw_info.layer_output_range(node.type) if known else None

    def kernel_axes(self, node: Node) -> Optional[Tuple[int, int]]:
        if node.kind != NodeKind.MODULE or "weight" not in node.weights:
            return None
        return self.fw_info.get_kernel_channels(node.type)

    def kernel_attr(self, node: Node) -> Optional[str]:
        return "weight" if self.kernel_axes(node) is not None else None

    def bias_attr(self, node: Node) -> Optional[str]:
        return "bias" if self.kernel_axes(node) is not None else None

    def matrix_weights(self, node: Node) -> Dict[Any, int]:
        if node.kind != NodeKind.MODULE or not isinstance(node.type, type):
            return {}
        if issubclass(node.type, (nn.RNNBase, nn.RNNCellBase)):  # weight_ih_l0, weight_hh_l0(_reverse), weight_hr_l0
            return {k: 0 for k, w in node.weights.items() if str(k).startswith("weight_") and np.ndim(w) == 2}
        if issubclass(node.type, (nn.Embedding, nn.EmbeddingBag)):  # (tokens, dims): a dims-wide one-hot product
            return {"weight": 1} if "weight" in node.weights else {}
        return {}

    def sensitivity_backend(self) -> Any:
        from hwquant.torch.mixed_precision import TorchSensitivityBackend
        return TorchSensitivityBackend(self.device, self.collective)

    def build(self, graph: Graph, quantized: bool) -> torch.nn.Module:
        return build_module(graph, QuantizerFactory() if quantized else None).to(self.device)

    def fake_quantized_model(self, graph: Graph) -> torch.nn.Module:
        from hwquant.torch.builder import FakeQuantizers
        return build_module(graph, FakeQuantizers()).to(self.device).eval()

    def node_runner(self, graph: Graph) -> Any:
        from hwquant.torch.builder import NodeRunner
        return NodeRunner(graph, self.device)

    def relative_output_errors(self, reference: torch.nn.Module, models: Sequence[torch.nn.Module],
                               data: Iterable[List[Any]], max_samples: int) -> List[float]:
        from hwquant.torch.output_error import relative_output_errors
        models = [reference.eval(), *models]
        # channels-last first where collect_statistics would use it, contiguous if the model refuses it
        fast = all(_has_conv2d(m) and not _has_view(m) for m in models)
        for channels_last in ([True, False] if fast else [False]):
            layout = torch.channels_last if channels_last else torch.contiguous_format
            models = [m.to(memory_format=layout) for m in models]
            batches = ([_channels_last(t.to(self.device)) if channels_last else t.to(self.device) for t in batch]
                       for batch in data)
            try:
                return relative_output_errors(models[0], models[1:], batches, max_samples)
            except RuntimeError:
                if not channels_last:
                    raise
        raise AssertionError("unreachable")

    def _observer(self, graph: Graph, node_names: Sequence[str], quantized: bool,
                  observer: Optional[Callable[[int, torch.Tensor], None]] = None) -> torch.nn.Module:
        model = build_module(graph, QuantizerFactory() if quantized else None, extra_outputs=list(node_names),
                             observer=observer)
        return model.to(self.device).eval()

    @torch.no_grad()
    def collect_statistics(self, graph: Graph, statistics: Dict[str, Any], data: Iterable[List[Any]],
                           quantized: bool = False) -> int:
        """Add every batch's summary of each node's output to `statistics[node]`."""
        names = list(statistics)
        summaries: List[Any] = []  # this batch's, added once the batch has run (a failed first batch adds none)

        def summarize(index: int, tensor: torch.Tensor) -> None:
            # each tensor is summarised as it is computed and then freed: a batch's activations are never
            # all held at once
            name = names[index]
            try:
                summaries.append((name, summarize_tensor(tensor, statistics[name])))
            except ValueError as e:
                raise ValueError(f"node '{name}': {e}") from e

        model = self._observer(graph, names, quantized, summarize)
        # Channels-last convolutions are much faster on CPU; a model that reshapes with `.view` cannot
        # run that way ("view size is not compatible"): such graphs stay contiguous, and should another
        # construct refuse the layout, the first batch falls back to it.
        channels_last = _has_conv2d(model) and not _has_view(model)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        batches = 0
        for batch in data:
            summaries.clear()
            try:
                model(*[_channels_last(t) if channels_last else t for t in batch])
            except RuntimeError as e:
                source = getattr(data, "iterable", data)  # data may come wrapped in a progress bar
                if batches and not getattr(source, "uniform_shapes", True):
                    raise RepresentativeDataError(
                        f"batch {batches} has input shapes {[tuple(t.shape[1:]) for t in batch]} (without the batch "
                        f"dimension), the first batch had {source.first_shapes}, and the model fails on them "
                        f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): sizes may vary between "
                        "batches only where the model allows it; give batches of one size") from e
                if not channels_last or batches:
                    raise
                channels_last, model = False, model.to(memory_format=torch.contiguous_format)
                summaries.clear()
                model(*batch)
            for name, summary in summaries:
                statistics[name].add(summary)
            batches += 1
        return batches


def _has_conv2d(model: torch.nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def _has_view(model: torch.fx.GraphModule) -> bool:
    return any(n.op == "call_method" and n.target == "view" for n in model.graph.nodes)


def _channels_last(t: Any) -> Any:
    return t.contiguous(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) and t.dim() == 4 else t
