"""PyTorch's back end of the mixed-precision sensitivity loop (core/mixed_precision/measurement.py):
the measurement primitives (the quantized model built once, a node's candidate put in by swapping its
quantizers, only the part downstream of it run again from a cache of the baseline run) and the
estimate used where nothing requires measuring: Gauss-Newton probes through one backward pass of the
float model (docs/architecture.md, "Mixed precision"; the local term is exact, J_ii being the identity).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch
from torch import fx

from hwquant.core.configuration.config import MpDistanceWeighting
from hwquant.core.pipeline.distributed import SINGLE_PROCESS, Collective, gather_rows, my_share
from hwquant.core.graph.model_graph import Graph, Node, NodeKind
from hwquant.core.mixed_precision.measurement import SensitivityBackend
from hwquant.core.mixed_precision.sensitivity import point_weights
from hwquant.torch.builder import QuantizerFactory, build_module, make_layer
from hwquant.torch.quantizers import set_quantizer

PROBE_ROUNDS = 4  # backward passes per batch; each image brings its own probes


def _float_model(graph: Graph, observed: List[str], device: Any) -> fx.GraphModule:
    model = build_module(graph, None, extra_outputs=observed).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@torch.enable_grad()  # (the probes are gradients: a caller's torch.no_grad() must not stop them)
def _hessian_traces(model, batches, points: List[str], outputs: List[str], observed: List[str]) -> Dict[str, float]:
    """Gauss-Newton trace of the normalised output distance with respect to each point (per element):
    E|d(sum_o v_o . Y_o / |Y_o|) / dY_p|^2 / size(Y_p), by output probes."""
    traces = {p: 0.0 for p in points}
    generator = torch.Generator().manual_seed(1)
    for batch in batches:
        xs = [t.clone().requires_grad_(True) if isinstance(t, torch.Tensor) else t for t in batch]
        _, tensors = model(*xs)
        by_name = dict(zip(observed, tensors))
        energy = {o: float((by_name[o].detach() ** 2).flatten(1).sum(1).mean()) + 1e-12 for o in outputs}
        loss = sum((torch.randn(by_name[o].shape, generator=generator).to(by_name[o].device) * by_name[o]).sum()
                   / math.sqrt(energy[o]) for o in outputs)
        grads = torch.autograd.grad(loss, [by_name[p] for p in points], allow_unused=True)
        for p, g in zip(points, grads):
            if g is not None:
                traces[p] += float((g ** 2).sum()) / g[0].numel()
    return traces


@torch.enable_grad()
def _probed(graph, configurable, batches, points, outputs, cfg, device,
            collective: Collective = SINGLE_PROCESS) -> List[List[float]]:
    """The probe estimate of every candidate's figure. Each batch's sums are computed on their own (its
    probes seeded by its index), so across processes the batches are dealt to the ranks and the sums
    gathered and added in batch order: the same figures as one process."""
    tracked = [n.name for n in configurable]
    single = [n.kind == NodeKind.MODULE and len(n.inputs) == 1 for n in configurable]
    input_names = [n.inputs[0] if s else n.name for n, s in zip(configurable, single)]
    observed = list(dict.fromkeys(tracked + points + outputs + input_names))
    model = _float_model(graph, observed, device)
    hessian = (_hessian_traces(model, batches, points, outputs, observed)
               if cfg.distance_weighting_method == MpDistanceWeighting.HESSIAN else {})
    weights = point_weights(cfg, points, outputs, hessian)
    candidates = _CandidateOutputs(configurable, device)
    scale = None  # the probes' scales come from the first batch's energies
    mine = my_share(collective, len(batches))
    if mine and mine[0] != 0:  # another rank probes the first batch: its energies are needed here too
        with torch.no_grad():
            scale = _probe_scales(dict(zip(observed, model(*batches[0])[1])), weights)
    found = {}
    for k in mine:
        found[k], scale = _probe_batch(model, batches[k], k, candidates, tracked, input_names, single, observed,
                                       scale, weights)
    sums = gather_rows(collective, found, len(batches), "estimating mixed-precision sensitivities")
    totals = [[0.0] * len(n.candidates) for n in configurable]
    for batch_sums in sums:
        for row, batch_row in zip(totals, batch_sums):
            for c, v in enumerate(batch_row):
                row[c] += v
    seen = sum(len(b[0]) for b in batches)
    return [[t / (max(seen, 1) * PROBE_ROUNDS) for t in row] for row in totals]


def _probe_scales(by_name: Dict[str, torch.Tensor], weights: Dict[str, float]) -> Dict[str, float]:
    """a_p = sqrt(weight_p / E|Y_p|^2): each point's probe scale, from one batch's tensors."""
    return {p: math.sqrt(w / (float((by_name[p].detach() ** 2).flatten(1).sum(1).mean()) + 1e-12))
            for p, w in weights.items()}


def _probe_batch(model, batch, index: int, candidates: "_CandidateOutputs", tracked, input_names, single, observed,
                 scale: Optional[Dict[str, float]], weights: Dict[str, float]) -> Tuple[List[List[float]], Dict[str, float]]:
    """One batch's sums of the squared probe projections, per node and candidate, and the probe scales
    (``scale`` None: this batch's, the first one's).

    Memory: a node's candidate outputs are made when the backward pass reaches the node (a hook on its
    output), projected on the gradient there and dropped, and no gradient is kept past its node: what the pass
    holds at once is the float forward's own, not every layer's outputs, candidates and gradients."""
    generator = torch.Generator().manual_seed(index)
    xs = [t.clone().requires_grad_(True) if isinstance(t, torch.Tensor) else t for t in batch]
    _, tensors = model(*xs)
    by_name = dict(zip(observed, tensors))
    if scale is None:
        scale = _probe_scales(by_name, weights)
    sums = [[0.0] * len(node.candidates) for node in candidates.nodes]

    def projector(i: int, x: Any, y: torch.Tensor):
        def project(g: torch.Tensor) -> None:
            for c, d in enumerate(candidates.deltas(i, x, y)):
                sums[i][c] += float(((g * d).flatten(1).sum(1) ** 2).sum())
        return project

    def prober(a: float):
        def add_probe(g: torch.Tensor) -> torch.Tensor:
            return g + torch.randn(g.shape, generator=generator).to(g.device) * a
        return add_probe

    handles = []
    for p, a in scale.items():  # first: a point's probe is in its gradient before a projection reads it
        if by_name[p].requires_grad:
            handles.append(by_name[p].register_hook(prober(a)))
    for i, (name, input_name, s) in enumerate(zip(tracked, input_names, single)):
        y = by_name[name]
        if y.requires_grad:
            handles.append(y.register_hook(projector(i, by_name[input_name] if s else None, y)))
    leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
    points = [by_name[p] for p in scale if by_name[p].requires_grad]
    # the pass starts from every point with a zero gradient (a broadcast scalar: no memory); each point's probe
    # a_p v_p is added by a hook when the pass reaches it, so the probes of sum_p a_p v_p . Y_p exist one at a time
    zeros = [torch.zeros((), dtype=t.dtype, device=t.device).expand(t.shape) for t in points]
    try:
        for _ in range(PROBE_ROUNDS):
            torch.autograd.grad(points, leaves, grad_outputs=zeros, retain_graph=True, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    return sums, scale


class _CandidateOutputs:
    """Y_c - Y for a node and each candidate c: the node's layer run on its float input with the
    candidate's weight quantizers, then the candidate's activation quantizer. The layers and quantizers are
    made once for all batches and probes."""

    def __init__(self, configurable: Sequence[Node], device: Any):
        self.nodes, self.device = list(configurable), device
        self._layers: Dict[int, Any] = {}
        self._weights: Dict[Tuple[int, int], Dict[str, Any]] = {}  # the weight quantizers
        self._activations: Dict[Tuple[int, int], Any] = {}
        self._factory = QuantizerFactory()

    @torch.no_grad()
    def deltas(self, i: int, x: Any, y: torch.Tensor) -> List[torch.Tensor]:
        node, out = self.nodes[i], []
        y = y.detach()
        for c, cand in enumerate(node.candidates):
            yc = y
            if isinstance(x, torch.Tensor) and (q := self._quantized_weights(i, c, cand)):
                yc = torch.func.functional_call(self._layers[i], q, (x.detach(),))
            if (i, c) not in self._activations:
                act = self._factory.activation(node, cand)
                self._activations[i, c] = act.to(self.device) if act is not None else None
            act = self._activations[i, c]
            out.append((act(yc) if act is not None else yc) - y)
        return out

    def _quantized_weights(self, i: int, c: int, cand: Any) -> Dict[str, torch.Tensor]:
        """The candidate's quantized weights, made on each call (cheap beside the layer's run; kept, every
        layer's candidates would hold several times the model's weights)."""
        if (i, c) not in self._weights:
            self._weights[i, c] = {name: q.to(self.device) for name, q in self._factory.weights(self.nodes[i], cand).items()}
        quantizers = self._weights[i, c]
        if quantizers and i not in self._layers:
            self._layers[i] = make_layer(self.nodes[i]).to(self.device)
        return {name: q(getattr(self._layers[i], name)).detach() for name, q in quantizers.items()}


# ---------------------------------------------------------------------------------------- measured
class _CachedRun(fx.Interpreter):
    """Runs a GraphModule taking every node outside `dirty` from `cache` (when given); records all
    values (the cache of a baseline run)."""

    def __init__(self, module: fx.GraphModule, cache=None, dirty: Set[fx.Node] = frozenset()):
        super().__init__(module, garbage_collect_values=False)
        self.cache, self.dirty, self.values = cache, dirty, {}

    def run_node(self, n: fx.Node) -> Any:
        if self.cache is not None and n not in self.dirty and n.op != "output":
            value = self.cache[n]
        else:
            value = super().run_node(n)
        self.values[n] = value
        return value


def _downstream(module: fx.GraphModule, names: Sequence[str]) -> Set[fx.Node]:
    todo = [n for n in module.graph.nodes if n.op == "call_module" and n.target in names]
    seen: Set[fx.Node] = set()
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(n.users)
    return seen


def _distance(cfg, reference: torch.Tensor, quantized: torch.Tensor) -> float:
    if cfg.compute_distance_fn is not None:
        return float(np.mean(np.asarray(torch.as_tensor(cfg.compute_distance_fn(reference, quantized)).detach().cpu())))
    per_sample = ((quantized - reference) ** 2).flatten(1).sum(1) / ((reference ** 2).flatten(1).sum(1) + 1e-12)
    return float(per_sample.mean())


class TorchSensitivityBackend(SensitivityBackend):
    def __init__(self, device: Any, collective: Collective = SINGLE_PROCESS):
        self.device, self.collective = device, collective

    def ready(self, t: Any, take: int) -> Any:
        return t[:take].to(self.device).float() if isinstance(t, torch.Tensor) else t

    def estimate(self, graph, configurable, batches, cfg, points, outputs) -> Optional[List[List[float]]]:
        return _probed(graph, configurable, batches, points, outputs, cfg, self.device, self.collective)

    def build(self, graph, configurable, observed, batches, cfg) -> None:
        self.observed, self.batches, self.cfg = list(observed), batches, cfg
        self.model = build_module(graph, QuantizerFactory(), extra_outputs=self.observed).to(self.device).eval()
        self.placement = self.model.meta["hwquant_placement"]
        self.dirty: Set[fx.Node] = set()
        self._downstream_of: Dict[str, Set[fx.Node]] = {}  # per node: the graph it dirties (the loop asks per batch)
        if cfg.custom_metric_fn is not None:
            return
        self.float_model = _float_model(graph, self.observed, self.device)
        with torch.no_grad():
            self.reference = [dict(zip(self.observed, self.float_model(*b)[1])) for b in batches]
            self.caches = []
            for b in batches:
                run = _CachedRun(self.model)
                run.run(*b)
                self.caches.append(run.values)

    def set_candidate(self, node: Node, candidate: Any) -> None:
        place = self.placement.get(node.name, {})
        _swap_quantizers(self.model, place, QuantizerFactory(), node, candidate, self.device)
        if node.name not in self._downstream_of:
            self._downstream_of[node.name] = _downstream(self.model, list(place.values()))
        self.dirty = self._downstream_of[node.name]

    def distances(self, batch_index: int) -> List[float]:
        ref = self.reference[batch_index]
        with torch.no_grad():
            _, tensors = _CachedRun(self.model, self.caches[batch_index], self.dirty).run(*self.batches[batch_index])
        return [_distance(self.cfg, ref[p], t) for p, t in zip(self.observed, tensors)]

    def hessian_traces(self, points, outputs) -> Dict[str, float]:
        with torch.enable_grad():
            return _hessian_traces(self.float_model, self.batches, list(points), list(outputs), self.observed)


def _swap_quantizers(model, place: Dict[str, str], factory, node: Node, cand, device) -> None:
    """Put the candidate's quantizers into the built model."""
    layer = model.get_submodule(place["layer"]) if "layer" in place else None
    if layer is not None and hasattr(layer, "weights_quantizers"):
        for attr, q in factory.weights(node, cand).items():
            if attr in layer.weights_quantizers:
                set_quantizer(layer, attr, q.to(device))
    holder = model.get_submodule(place["holder"]) if "holder" in place else None
    act = factory.activation(node, cand)
    if holder is not None and act is not None:
        set_quantizer(holder, None, act.to(device))
