"""Each framework adapter meets the contract the framework-free code is written against
(core/graph/framework_adapter.py): every method of the protocol, with its parameters, and the behaviours the
passes and loops rely on, checked on a captured model."""
import inspect

import numpy as np
import pytest

from hwquant.core.graph.framework_adapter import CorrectionFacts, FrameworkAdapter
from hwquant.core.configuration.framework_info import FrameworkInfo
from hwquant.core.mixed_precision.measurement import SensitivityBackend
from hwquant.core.statistics.tensor_statistics import TensorStatistics

SPECS = [("conv", 8, 3, False), ("bn",), ("relu",), ("conv", 4, 1)]
IN_SHAPE = (3, 9, 9)


def _contract():
    names = {}
    for protocol in (CorrectionFacts, FrameworkAdapter):
        for name, member in vars(protocol).items():
            if inspect.isfunction(member) and not name.startswith("_"):
                names[name] = member
    return names


@pytest.fixture
def captured(kit):
    model = kit.model(IN_SHAPE, SPECS)
    batches = kit.batches(IN_SHAPE, n=2, batch=4)
    graph = kit.capture(model, batches[0])
    return model, batches, graph, kit.adapter(graph)


def test_the_contract_is_not_empty():
    assert {"build", "collect_statistics", "sensitivity_backend", "linear_geometry", "canonical_kernel"} <= set(_contract())


def test_every_method_of_the_contract_is_implemented_with_its_parameters(captured):
    adapter = captured[3]
    for name, stub in _contract().items():
        implemented = getattr(type(adapter), name, None)
        assert implemented is not None and implemented is not stub, f"{type(adapter).__name__} lacks {name}"
        want = list(inspect.signature(stub).parameters)
        got = list(inspect.signature(implemented).parameters)
        assert got[:len(want)] == want, f"{type(adapter).__name__}.{name}{tuple(got)} differs from the contract {tuple(want)}"
        extra = [inspect.signature(implemented).parameters[p] for p in got[len(want):]]
        assert all(p.default is not inspect.Parameter.empty for p in extra), f"{name}: extra parameters need defaults"
    assert isinstance(adapter.fw_info, FrameworkInfo) and adapter.activation_channel_axis in (1, -1)
    assert isinstance(adapter.name, str) and adapter.name


def test_kernel_facts_and_layouts(captured):
    _, _, graph, adapter = captured
    kernels = [n for n in graph if adapter.kernel_attr(n) in n.weights]
    assert len(kernels) == 2
    for node in kernels:
        kernel = np.asarray(node.weights[adapter.kernel_attr(node)])
        canonical = adapter.canonical_kernel(node, kernel)
        np.testing.assert_array_equal(adapter.framework_kernel(node, canonical), kernel)  # a round trip
        geometry = adapter.linear_geometry(node)
        assert geometry.kind == "conv" and canonical.shape[:2] == (geometry.out_channels, geometry.in_channels)
        assert adapter.kernel_axes(node) is not None
    assert any(adapter.batch_norm_params(n) is not None for n in graph)
    assert all(adapter.matrix_weights(n) == {} for n in graph)  # no recurrent or embedding layer here


def test_build_statistics_and_the_sensitivity_back_end(kit, captured):
    model, batches, graph, adapter = captured
    x = batches[0][0]
    np.testing.assert_allclose(kit.run(adapter.build(graph, quantized=False), x), kit.run(model, x), rtol=1e-5,
                               atol=1e-5)
    stats = {n.name: TensorStatistics(channel_axis=adapter.activation_channel_axis) for n in graph if n.inputs}
    assert adapter.collect_statistics(graph, stats, batches) == len(batches)
    assert all(s.count > 0 for s in stats.values())
    assert isinstance(adapter.sensitivity_backend(), SensitivityBackend)
