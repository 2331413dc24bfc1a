"""How important each output channel of a section's entry layer is, framework-free.

LFH (MCT's label-free Hessian metric): Ci_score = Trace(H_Ci) * SqL2Norm(W_Ci) / |Ci|, with H the Hessian of
the output's squared change with respect to the entry's kernel, estimated per image by Hutchinson probes
(v ~ N(0, 1) over every output: E[(J^T v)^2] is the diagonal of J^T J), summed over each channel's weights and
averaged over ``num_score_approximations`` images. A SIMD group's score is the same formula over the group:
the sum of its traces times its squared norm over its weight count. One backward pass gives every entry
layer's gradient at once (MCT runs each entry layer apart, up to 100 probes per image).

MAGNITUDE (hwquant's, no data): SqL2Norm(W_Ci); a group's score is the sum over the group."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Protocol, Sequence

import numpy as np

from hwquant.pruning.sections import Section

# probes per image (one forward pass, that many backward passes); the images average the rest out
PROBES_PER_IMAGE = 2


class GradientBackend(Protocol):
    data: Any  # the representative data: an iterable of batches, each a list of the framework's tensors

    def kernel_gradients(self, sample: Any, entries: Sequence[str], probes: int,
                         rng: np.random.Generator) -> Any:
        """For each of ``probes`` vectors v ~ N(0, 1) the shape of the float model's outputs (drawn from
        ``rng``), the gradient of sum(v * outputs) with respect to each entry layer's kernel: an iterator of
        {entry: numpy array in the framework's kernel layout}, from one forward pass."""


def single_samples(data: Any, n: int) -> Iterator[List[Any]]:
    """Up to ``n`` one-sample input lists from the representative batches (MCT scores on single images)."""
    given = 0
    for batch in data:
        for i in range(len(batch[0])):
            if given == n:
                return
            yield [x[i:i + 1] for x in batch]
            given += 1


def _per_channel(values: np.ndarray, out_axis: int) -> np.ndarray:
    moved = np.moveaxis(np.asarray(values, np.float64), out_axis, 0)
    return moved.reshape(moved.shape[0], -1).sum(1)


def lfh_traces(backend: GradientBackend, kernels: Dict[str, np.ndarray], out_axes: Dict[str, int],
               n_images: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """Each entry layer's Hessian trace per output channel, averaged over up to ``n_images`` images."""
    rng = np.random.default_rng(seed)
    entries = list(kernels)
    sums = {e: np.zeros(kernels[e].shape[out_axes[e]]) for e in entries}
    images = 0
    for sample in single_samples(backend.data, n_images):
        for grads in backend.kernel_gradients(sample, entries, PROBES_PER_IMAGE, rng):
            for e in entries:
                sums[e] += _per_channel(np.square(grads[e]), out_axes[e]) / PROBES_PER_IMAGE
        images += 1
    if images == 0:
        raise ValueError("the representative dataset gave no image to score channels with")
    return {e: s / images for e, s in sums.items()}


def channel_scores(kernel: np.ndarray, out_axis: int, traces: Any = None) -> np.ndarray:
    """Per output channel: LFH's Trace * SqL2Norm / |Ci| with ``traces``; the squared norm without."""
    norms = _per_channel(np.square(kernel), out_axis)
    if traces is None:
        return norms
    per_channel = kernel.size // kernel.shape[out_axis]
    return np.asarray(traces, np.float64) * norms / per_channel


def group_scores(kernel: np.ndarray, out_axis: int, groups: List[np.ndarray], traces: Any = None) -> np.ndarray:
    """Per SIMD group, the channel formula over the group's channels together."""
    norms = _per_channel(np.square(kernel), out_axis)
    if traces is None:
        return np.array([norms[g].sum() for g in groups])
    per_channel = kernel.size // kernel.shape[out_axis]
    traces = np.asarray(traces, np.float64)
    return np.array([traces[g].sum() * norms[g].sum() / (per_channel * len(g)) for g in groups])


def unroll(groups: List[np.ndarray], scores: np.ndarray, channels: int) -> np.ndarray:
    """Per channel, its group's score (what PruningInfo.importance_scores holds, as MCT)."""
    out = np.zeros(channels)
    for g, s in zip(groups, scores):
        out[g] = s
    return out


def section_kernels(graph: Any, adapter: Any, sections: Sequence[Section]) -> Dict[str, np.ndarray]:
    return {s.entry: np.asarray(graph.node(s.entry).weights[adapter.kernel_attr(graph.node(s.entry))])
            for s in sections}
