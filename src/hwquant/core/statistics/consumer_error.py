"""Judge an activation's quantization error where it matters: after the element-wise function
that reads it.

A tensor read only by an element-wise function f (sqrt, sigmoid, exp, GELU, ...) passes on
f(q(x)) - f(x), not q(x) - x: behind a sqrt (a power spectrum's magnitude) the small values carry
the signal and a finer grid near zero is worth clipping the peaks; behind a sigmoid the saturated
tails hardly matter. The threshold / range search then scores its candidates on f of the histogram
values. Framework-free: the adapter names the function (`ActivationInfo`), numpy evaluates it.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from hwquant.core.graph.framework_adapter import ActivationInfo

ValueMap = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


# Functions without a pole on the real line (log / reciprocal would score 0 as infinitely wrong).
_MAPS: Dict[str, ValueMap] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "sqrt": lambda x: np.sqrt(np.maximum(x, 0.0)),
    "exp": lambda x: np.exp(np.minimum(x, 80.0)),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "hardsigmoid": lambda x: np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "silu": lambda x: x * _sigmoid(x),
    "hardswish": lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    # tanh form: within 1e-3 of the erf form, ample for comparing thresholds
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x))),
    "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),
}


def value_map(info: Optional[ActivationInfo]) -> Optional[ValueMap]:
    """numpy form of the element-wise function `info` describes, or None where there is none."""
    if info is None:
        return None
    if info.name in ("relu6", "hardtanh") and info.lower is not None and info.upper is not None:
        lo, hi = float(info.lower), float(info.upper)
        return lambda x: np.clip(x, lo, hi)
    return _MAPS.get(info.name)


def _reader_function(graph, adapter, node, through_add: bool) -> Optional[ActivationInfo]:
    readers = graph.successors(node)
    if not readers or graph.is_output(node):
        return None
    infos = []
    for r in readers:
        info = adapter.activation_info(r)
        if info is None and through_add and adapter.is_add(r):
            # An addend's error reaches the function after the add unchanged; where on f it lands
            # depends on the other addend. Taken as small only before a sqrt (a sum of squares:
            # re*re + im*im -> magnitude); before a ReLU the other addend is often a residual
            # that moves the kink, so no map there.
            after = _reader_function(graph, adapter, r, through_add=False)
            info = after if after is not None and after.name == "sqrt" else None
        if info is None:
            return None
        infos.append(info)
    return infos[0] if len({(i.name, i.lower, i.upper) for i in infos}) == 1 else None


def consumer_value_map(graph, adapter, node) -> Optional[ValueMap]:
    """The function every reader of `node` applies to it (directly, or after one add), when they all
    apply the same one and the node is not a model output (read as it is); else None."""
    return value_map(_reader_function(graph, adapter, node, through_add=True))
