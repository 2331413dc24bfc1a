"""Keras' back end of the mixed-precision sensitivity loop (core/mixed_precision/measurement.py): every
figure is measured (no gradient probes), Hessian weights by output probes through keras/gradients.py.

One quantized model serves every candidate: a candidate's kernels are assigned to its layer's
weights and its activation grid to a holder whose grid is a variable, so that the model is neither
rebuilt nor (on TensorFlow) traced again per candidate (MobileNetV2, weights at 75 %: 479 s with a
model built per candidate). The baseline (every configurable node at its largest candidate) is
measured once per batch: a node's largest candidate takes its figures instead of another run.

On the eager backends (torch) the candidates are measured as PyTorch's back end measures them: the
baseline runs node by node over the core graph with the model's own layers, keeping the tensors a
later run reads; a candidate then runs only the nodes downstream of the node it changes, the other
observed tensors keeping the baseline's distances (MobileNetV2, 4 images: the sensitivities in a
sixth of the time whole-model runs took, the same figures). On TensorFlow (and JAX), where a model
runs as one traced function, a candidate runs the whole model, the default distance computed inside
it (squared-error layers holding the batch's float reference): one number per sample leaves the
model, not the tensors."""
from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Optional, Sequence, Set

import keras
import numpy as np
from keras import ops

from hwquant.core.numerics import quant_math
from hwquant.core.graph.model_graph import Graph, Node, NodeKind, map_input_refs
from hwquant.core.mixed_precision.measurement import SensitivityBackend
from hwquant.errors import InvalidConfigError
from hwquant.keras.builder import build_model, set_layer_weights
from hwquant.keras.gradients import gradients
from hwquant.keras.inference import predict_on_batch
from hwquant.keras.quantized_model import (HOLDER_SUFFIX, QuantizationBlocks, activation_quantizer,
                                           build_quantized_model, quantized_weights, weight_quantizers)
from hwquant.keras.quantizers import KerasActivationQuantizationHolder


class _SwappableActivation(keras.layers.Layer):
    """A per-tensor activation quantizer whose grid (enabled, scale, zero point, qmin, qmax) is a variable."""

    def build(self, input_shape):
        self.grid = self.add_weight(shape=(5,), initializer="zeros", trainable=False, name="grid")

    def set_quantizer(self, quantizer: Any) -> None:
        if quantizer is None:
            self.grid.assign(np.array([0, 1, 0, 0, 0], np.float32))
            return
        grid = quantizer.grid
        if not isinstance(grid, quant_math.AffineGrid) or np.size(grid.scale) != 1:
            raise InvalidConfigError(f"'{self.name}': mixed precision of Keras activations takes per-tensor uniform "
                                     "grids (power-of-two, symmetric, uniform)")
        self.grid.assign(np.array([1, float(np.asarray(grid.scale)), float(np.asarray(grid.zero_point)), grid.qmin,
                                   grid.qmax], np.float32))

    def call(self, x):
        enabled, scale, zero_point, qmin, qmax = (self.grid[i] for i in range(5))
        return ops.where(enabled > 0, quant_math.fake_quantize_with_bounds(x, scale, zero_point, qmin, qmax), x)

    def compute_output_shape(self, input_shape):
        return input_shape


class _SwappableBlocks(QuantizationBlocks):
    """The quantized build with a swappable holder after every configurable node; it records what the
    build calls for each node (the layer or its wrapper, the fixed activation quantizers) for the
    node-by-node runs."""

    def __init__(self, configurable: Sequence[Node]):
        super().__init__()
        self.configurable = {n.name for n in configurable}
        self.called: Dict[str, Any] = {}  # node -> the layer the model calls (a wrapper when its weights are quantized)
        self.fixed: Dict[str, Any] = {}   # node -> the activation quantizer of its (non-configurable) holder

    def wrap(self, node: Node, layer: Any) -> Any:
        self.called[node.name] = super().wrap(node, layer)
        return self.called[node.name]

    def after(self, node: Node, tensor: Any) -> Any:
        if node.name in self.configurable:
            return _SwappableActivation(name=f"{node.name}{HOLDER_SUFFIX}")(tensor)
        quantizer = activation_quantizer(node)
        if quantizer is None:
            return tensor
        self.fixed[node.name] = quantizer
        return KerasActivationQuantizationHolder(quantizer, name=f"{node.name}{HOLDER_SUFFIX}")(tensor)


def _inference() -> Any:
    """No autograd records around the node-by-node runs (predict_on_batch's own no_grad on torch)."""
    if keras.backend.backend() == "torch":
        import torch
        return torch.no_grad()
    return contextlib.nullcontext()


class _DownstreamRun:
    """The built quantized model run eagerly node by node over the core graph, each node computed as
    build_model computed it (the model's own layers and operations, then the node's activation
    quantizer). ``run`` computes the nodes of ``part`` from ``kept`` (the tensors of the others) and
    hands each observed tensor to ``observe`` as soon as it exists; a tensor is dropped after its last
    reader, unless it is one the baseline keeps for later runs."""

    def __init__(self, graph: Graph, model: Any, blocks: _SwappableBlocks, configurable: Sequence[Node],
                 observed: Sequence[str]):
        self.nodes = list(graph)
        self.called, self.observed = blocks.called, {p: i for i, p in enumerate(observed)}
        self.activation: Dict[str, Any] = {}  # node -> its activation quantizer now, as _fake_quantizer makes it
        for name, quantizer in blocks.fixed.items():
            self.set_activation(name, quantizer)
        self.inputs = {n.name: (j, t.dtype) for j, (n, t) in enumerate(zip(graph.input_nodes, model.inputs))}
        readers: Dict[str, List[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                readers[i].append(n.name)
        order = {n.name: k for k, n in enumerate(self.nodes)}
        self.last_read = {name: max((order[r] for r in rs), default=order[name]) for name, rs in readers.items()}
        self.downstream: Dict[str, Set[str]] = {}  # a configurable node -> it and every node reading it, directly or not
        for node in configurable:
            part, todo = {node.name}, [node.name]
            while todo:
                for r in readers[todo.pop()]:
                    if r not in part:
                        part.add(r)
                        todo.append(r)
            self.downstream[node.name] = part
        # the tensors a candidate's run reads from the baseline: what its part reads from outside it
        self.keep = {i for part in self.downstream.values() for name in part for i in graph.node(name).inputs
                     if i not in part}

    def set_activation(self, name: str, quantizer: Any) -> None:
        self.activation[name] = _fake_quantizer(quantizer)

    def run(self, batch: Sequence[Any], part: Optional[Set[str]], kept: Dict[str, Any], observe: Any) -> None:
        values = dict(kept)
        with _inference():
            for k, node in enumerate(self.nodes):
                if part is None or node.name in part:
                    out = self._output(node, values, batch)
                    if node.name in self.observed:
                        observe(self.observed[node.name], out)
                    values[node.name] = out
                for i in node.inputs:  # (an input read twice is dropped once)
                    if self.last_read[i] == k and (part is not None or i not in self.keep):
                        values.pop(i, None)
            if part is None:
                kept.update((name, values[name]) for name in self.keep)

    def _output(self, node: Node, values: Dict[str, Any], batch: Sequence[Any]) -> Any:
        if node.kind == NodeKind.INPUT:
            j, dtype = self.inputs[node.name]
            out = ops.convert_to_tensor(batch[j], dtype=dtype)
        else:
            fill = lambda ref: values[node.inputs[ref.index]]  # noqa: E731
            args, kwargs = map_input_refs(node.call_args, fill), map_input_refs(node.call_kwargs, fill)
            if node.call_target == "getitem":
                out = args[0][args[1]]
            else:
                op = self.called[node.name] if node.kind == NodeKind.MODULE else node.call_target
                if "training" in getattr(op, "_call_context_args", ()):  # (as a functional model calls it)
                    kwargs = {**kwargs, "training": False}
                out = op(*args, **kwargs)
        quantizer = self.activation.get(node.name)
        return out if quantizer is None else quantizer(out)


def _fake_quantizer(quantizer: Any) -> Any:
    """``quantizer`` as the node-by-node runs apply it: a per-tensor affine grid through the swappable holder's
    fake_quantize_with_bounds, its parameters made tensors once (converting them at every call cost about
    a tenth of a run; the values are the quantizer's own, a zero's sign apart), any other grid by the
    quantizer itself."""
    if quantizer is None:
        return None
    grid = quantizer.grid
    if not isinstance(grid, quant_math.AffineGrid) or np.size(grid.scale) != 1:
        return quantizer
    scale, zero_point = (ops.convert_to_tensor(np.asarray(v, np.float32).reshape(())) for v in (grid.scale, grid.zero_point))
    return lambda x: quant_math.fake_quantize_with_bounds(x, scale, zero_point, grid.qmin, grid.qmax)


def _energy(x: np.ndarray) -> np.ndarray:
    """Per-sample sum of squares."""
    rows = x.reshape(len(x), -1)
    return np.einsum("ij,ij->i", rows, rows).astype(np.float64)


def _run(model: Any, batch: List[np.ndarray]) -> List[np.ndarray]:
    _, extra = predict_on_batch(model, batch if len(batch) > 1 else batch[0])
    return [np.asarray(t, np.float32) for t in extra]


class _SquaredError(keras.layers.Layer):
    """Per-sample sum of squared differences between its input and a reference batch held in a
    variable (assigned once per batch): one number per sample leaves the model instead of the tensor
    (MobileNetV2: ~600 MB a candidate, whose copy and numpy distance took 2/3 of the time)."""

    def __init__(self, rows: int, **kwargs):
        super().__init__(**kwargs)
        self.rows = rows

    def build(self, input_shape):
        self.reference = self.add_weight(shape=(self.rows,) + tuple(input_shape[1:]), initializer="zeros",
                                         trainable=False, name="reference")

    def call(self, x):
        return _squared_error(x, self.reference[:ops.shape(x)[0]])

    def compute_output_shape(self, input_shape):
        return (input_shape[0],)


def _squared_error(x: Any, reference: Any) -> Any:
    n = ops.shape(x)[0]
    d = ops.subtract(x, reference)
    return ops.sum(ops.reshape(ops.multiply(d, d), (n, -1)), axis=1)


def _errors_model(model: Any, observed: Sequence[str], rows: int) -> Any:
    """`model` (extra outputs: the observed tensors) ending in a _SquaredError per observed tensor."""
    extra = model.outputs[-len(observed):]
    return keras.Model(model.inputs, [_SquaredError(rows, name=f"{p}_squared_error")(t) for p, t in zip(observed, extra)])


class KerasSensitivityBackend(SensitivityBackend):
    def __init__(self, node_by_node: Optional[bool] = None):
        """``node_by_node``: candidates measured by downstream runs (default: on Keras' eager torch backend)
        rather than whole-model runs (default on TensorFlow and JAX); both give the same distances."""
        self.node_by_node = keras.backend.backend() == "torch" if node_by_node is None else node_by_node

    def build(self, graph, configurable, observed, batches, cfg) -> None:
        self.observed, self.batches, self.cfg = list(observed), batches, cfg
        self.blocks = _SwappableBlocks(configurable)
        self.model = build_quantized_model(graph, extra_outputs=self.observed, blocks=self.blocks)
        self.runner: Optional[_DownstreamRun] = None
        self.baseline = {n.name: n.final_config for n in configurable}
        self.changed: Set[str] = set()  # the configurable nodes away from their baseline candidate
        for node in configurable:
            self.set_candidate(node, node.final_config)
        if cfg.custom_metric_fn is not None:
            return
        self.float_model = build_model(graph, extra_outputs=self.observed)
        self.reference = [_run(self.float_model, b) for b in batches]
        self.energies = [[_energy(r) for r in ref] for ref in self.reference]
        self.base: List[List[float]] = []  # per batch, the baseline's distances
        if not self.node_by_node:  # (TensorFlow and JAX run a model as one traced function)
            self.errors_model = None if cfg.compute_distance_fn is not None else \
                _errors_model(self.model, self.observed, max(len(b[0]) for b in batches))
            self.loaded = None  # the batch whose reference the squared-error layers hold
            self.base = [self._whole_model_distances(k) for k in range(len(batches))]
            return
        self.runner = _DownstreamRun(graph, self.model, self.blocks, configurable, self.observed)
        for node in configurable:
            self.runner.set_activation(node.name, activation_quantizer(node))
        self.reference_tensors = [[ops.convert_to_tensor(r) for r in ref] for ref in self.reference]
        self.kept: List[Dict[str, Any]] = []  # per batch, the baseline's tensors the runs read
        for k in range(len(batches)):
            kept: Dict[str, Any] = {}
            self.base.append(self._run_part(k, None, kept))
            self.kept.append(kept)

    def set_candidate(self, node: Node, candidate: Any) -> None:
        quantizer = _set_candidate(self.model, node, candidate)
        if self.runner is not None:
            self.runner.set_activation(node.name, quantizer)
        (self.changed.discard if candidate is self.baseline.get(node.name) else self.changed.add)(node.name)

    def distances(self, batch_index: int) -> List[float]:
        if not self.changed:  # (the baseline candidates: measured once per batch)
            return list(self.base[batch_index])
        if self.runner is None:
            return self._whole_model_distances(batch_index)
        part = set().union(*(self.runner.downstream[name] for name in self.changed))
        return self._run_part(batch_index, part, self.kept[batch_index])

    def _whole_model_distances(self, k: int) -> List[float]:
        batch, ref = self.batches[k], self.reference[k]
        if self.errors_model is None:
            return [float(np.mean(np.asarray(self.cfg.compute_distance_fn(r.astype(np.float64), q.astype(np.float64)))))
                    for q, r in zip(_run(self.model, batch), ref)]
        if self.loaded != k:
            for p, r in zip(self.observed, ref):
                layer = self.errors_model.get_layer(f"{p}_squared_error")
                layer.reference.assign(np.concatenate([r, np.zeros((layer.rows - len(r),) + r.shape[1:], r.dtype)]))
            self.loaded = k
        squared = predict_on_batch(self.errors_model, batch if len(batch) > 1 else batch[0])
        return [float((np.asarray(e, np.float64) / (energy + 1e-12)).mean()) for e, energy in zip(squared, self.energies[k])]

    def _run_part(self, k: int, part: Optional[Set[str]], kept: Dict[str, Any]) -> List[float]:
        """Run ``part`` of the model (None: all of it, recording ``kept``) on batch ``k``: the observed
        tensors' distances, the baseline's where ``part`` does not reach."""
        found = list(self.base[k]) if part is not None else [0.0] * len(self.observed)
        ref, energies, fn = self.reference[k], self.energies[k], self.cfg.compute_distance_fn

        def observe(i: int, tensor: Any) -> None:
            if fn is not None:
                q = np.asarray(ops.convert_to_numpy(tensor), np.float32)
                found[i] = float(np.mean(np.asarray(fn(ref[i].astype(np.float64), q.astype(np.float64)))))
                return
            squared = np.asarray(ops.convert_to_numpy(_squared_error(tensor, self.reference_tensors[k][i])), np.float64)
            found[i] = float((squared / (energies[i] + 1e-12)).mean())

        self.runner.run(self.batches[k], part, kept, observe)
        return found

    def hessian_traces(self, points, outputs) -> Dict[str, float]:
        """E|d(sum_o v_o . Y_o / |Y_o|) / dY_p|^2 / size(Y_p) with Gaussian probes v_o at the outputs."""
        index = {name: i for i, name in enumerate(self.observed)}
        traces = dict.fromkeys(points, 0.0)
        rng = np.random.default_rng(1)
        for batch, ref in zip(self.batches, self.reference):
            energy = {o: float(_energy(ref[index[o]]).mean()) + 1e-12 for o in outputs}
            probes = {o: rng.standard_normal(ref[index[o]].shape).astype(np.float32) for o in outputs}

            def forward(xs, energy=energy, probes=probes):
                _, tensors = self.float_model(xs if len(xs) > 1 else xs[0], training=False)
                loss = sum(ops.sum(ops.multiply(tensors[index[o]], ops.convert_to_tensor(probes[o])))
                           / float(np.sqrt(energy[o])) for o in outputs)
                return loss, [tensors[index[p]] for p in points]
            for p, g in zip(points, gradients(forward, batch, "Hessian-weighted mixed precision")):
                if g is not None:
                    traces[p] += float(np.square(g, dtype=np.float64).sum()) / g[0].size
        return traces


def _set_candidate(model: Any, node: Node, candidate: Any) -> Any:
    """Put the node's candidate into the model: its quantized weights, its activation grid (its
    activation quantizer returned, None for none)."""
    node.final_config = candidate
    if node.weights:
        name = f"quant_{node.name}" if any(layer.name == f"quant_{node.name}" for layer in model.layers) else node.name
        layer = model.get_layer(name)
        set_layer_weights(getattr(layer, "layer", layer), quantized_weights(node, weight_quantizers(node)))
    quantizer = activation_quantizer(node)
    model.get_layer(f"{node.name}{HOLDER_SUFFIX}").set_quantizer(quantizer)
    return quantizer
