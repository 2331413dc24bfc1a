"""The graph passes, written once against tests/backend_kit.py and run on every back end present
(PyTorch and Keras; the TensorFlow CI venv has Keras only). The per-framework pass tests keep the
variants a single framework has (padding modes, call styles)."""
import copy

import numpy as np
import pytest

from hwquant.core.statistics.node_parameters import set_weights_params
from hwquant.core.passes.bias_correction import apply_bias_correction
from hwquant.core.passes.bn_folding import fold_batch_norms
from hwquant.core.passes.linear_collapsing import collapse_linear_layers
from hwquant.core.passes.residual_collapsing import collapse_residuals
from hwquant.core.passes.shift_negative import apply_shift_negative_correction
from hwquant.tpc.platforms import get_target_platform_capabilities


def _kernel_nodes(graph, adapter):
    return [n for n in graph if adapter.kernel_attr(n) in n.weights]


def _float_pass(kit, in_shape, specs, run_pass, batch=4):
    """(passes applied, kernel layers left, model output, output of the graph after the pass)."""
    model = kit.model(in_shape, specs)
    (x,) = kit.batches(in_shape, n=1, batch=batch)[0]
    graph = kit.capture(model, [x])
    adapter = kit.adapter(graph)
    n = run_pass(graph, adapter)
    return n, len(_kernel_nodes(graph, adapter)), kit.run(model, x), kit.graph_output(graph, x)


@pytest.mark.parametrize("in_shape, specs, collapses", [
    ((3, 9, 9), [("conv", 16, 3), ("conv", 4, 1)], 1),
    ((3, 9, 9), [("conv", 8, 1, False), ("conv", 4, 1)], 1),
    ((6,), [("dense", 32), ("dense", 16, False), ("dense", 5)], 2),
])
def test_linear_layers_collapse_exactly(kit, in_shape, specs, collapses):
    n, kernels, want, got = _float_pass(kit, in_shape, specs, collapse_linear_layers)
    assert (n, kernels) == (collapses, 1)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_a_relu_between_keeps_the_layers_apart(kit):
    n, kernels, want, got = _float_pass(kit, (3, 9, 9), [("conv", 8, 3), ("relu",), ("conv", 4, 1)],
                                        collapse_linear_layers)
    assert (n, kernels) == (0, 2)
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("k", [1, 3])
def test_conv_plus_its_input_collapses_exactly(kit, k):
    n, kernels, want, got = _float_pass(kit, (6, 9, 9), [("residual", k)], collapse_residuals)
    assert (n, kernels) == (1, 1)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_batch_norm_folds_into_the_conv_exactly(kit):
    n, kernels, want, got = _float_pass(kit, (3, 9, 9), [("conv", 8, 3, False), ("bn",), ("relu",)],
                                        fold_batch_norms)
    assert (n, kernels) == (1, 1)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_bias_correction_removes_the_kernels_mean_error(kit):
    """Kernels coarsened to 3 bits per tensor: a large, biased error; the correction removes most of each
    output channel's mean error in the quantized model."""
    in_shape = (3, 9, 9)
    model = kit.model(in_shape, [("conv", 8, 3), ("relu",), ("conv", 8, 3)])
    batches = kit.batches(in_shape, n=2, batch=32, seed=1)
    x = batches[0][0]
    errors = []
    for correct in (False, True):
        state = kit.state(model, batches)
        for node in _kernel_nodes(state.graph, state.adapter):
            wc = node.final_config.weights_quantization_cfg.attrs[state.adapter.kernel_attr(node)]
            wc.weights_n_bits, wc.weights_per_channel_threshold = 3, False
            set_weights_params(node.final_config, node.weights)
        if correct:
            assert apply_bias_correction(state.graph, state.adapter, state.statistics) == 2
        errors.append(np.abs(kit.channel_means(kit.quantized_output(state, x) - kit.run(model, x))).mean())
    assert errors[1] < 0.5 * errors[0]


def test_shift_negative_correction_keeps_the_function_and_lowers_the_error(kit):
    """A SiLU's negative tail shifted onto an unsigned grid, the shift absorbed by the next conv: the
    float model computes the same function and the activation's quantization error drops."""
    in_shape = (3, 8, 8)
    model = kit.model(in_shape, [("conv", 8, 3), ("silu",), ("conv", 4, 1)])
    batches = kit.batches(in_shape, n=3, batch=8, scale=3.0, seed=2)
    x = batches[0][0]
    errors = []
    for snc in (False, True):
        # IMX500 4.0: the SiLU's own output keeps a 16-bit quantizer (the converter needs it quantized)
        state = kit.state(model, batches, get_target_platform_capabilities("4.0", "imx500"), shift_negative_ratio=0.3)
        for node in state.graph:  # float kernels: the activation's quantization only
            for wc in node.final_config.weights_quantization_cfg.attrs.values():
                wc.enable_weights_quantization = False
        if snc:
            assert apply_shift_negative_correction(state.graph, state.adapter, state.statistics, state.fqc,
                                           state.fused_groups, batches) == 1
            want = kit.run(model, x)  # (a GPU's TF32 convolutions: ~1e-3 relative)
            np.testing.assert_allclose(kit.graph_output(copy.deepcopy(state.graph), x), want, rtol=1e-4,
                                       atol=1e-3 * np.abs(want).max())
        errors.append(((kit.quantized_output(state, x) - kit.run(model, x)) ** 2).mean())
    assert errors[1] < errors[0]
