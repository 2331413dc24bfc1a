"""The facades, tested once and run on every back end present (tests/backend_kit.py): post-training
quantization, resource data and mixed precision, the deployment file, save and load, MCT's debug bypass."""
import numpy as np
import pytest

import hwquant as mct

SPECS = [("conv", 8, 3, False), ("bn",), ("relu",), ("conv", 16, 3), ("relu",), ("conv", 8, 1)]
IN_SHAPE = (3, 12, 12)


@pytest.fixture
def setup(kit):
    model = kit.model(IN_SHAPE, SPECS)
    batches = kit.batches(IN_SHAPE, n=4, batch=8, seed=3)
    return model, batches


def _sqnr(reference: np.ndarray, other: np.ndarray) -> float:
    return float(10 * np.log10((reference ** 2).sum() / max(((reference - other) ** 2).sum(), 1e-30)))


def test_ptq_keeps_the_function_and_quantizes_every_layer(kit, setup):
    model, batches = setup
    q, info = kit.ptq(model, batches)
    x = batches[0][0]
    assert _sqnr(kit.run(model, x), kit.run(q, x)) > 25
    assert info.float_layers == {}  # the folded BN and the three convolutions: nothing left float


@pytest.mark.parametrize("hessian", [False, True])
def test_mixed_precision_meets_a_weights_target(kit, setup, hessian):
    model, batches = setup
    full = kit.resource_utilization_data(model, batches)
    target = mct.core.ResourceUtilization(weights_memory=full.weights_memory * 0.6)
    mp = mct.core.MixedPrecisionQuantizationConfig(use_hessian_based_scores=hessian)
    q, info = kit.ptq(model, batches, target_resource_utilization=target,
                      core_config=mct.core.CoreConfig(mixed_precision_config=mp))
    assert info.final_resource_utilization.weights_memory <= target.weights_memory
    weight_bits = [b for _, attrs in info.mixed_precision_bit_widths.values() for b in attrs.values()]
    assert min(weight_bits) < 8  # 60 % of the 8-bit weights memory: some kernel went below 8 bits
    x = batches[1][0]
    assert _sqnr(kit.run(model, x), kit.run(q, x)) > 12


def test_the_deployment_file_computes_what_the_simulation_does(kit, setup, tmp_path):
    model, batches = setup
    q, _ = kit.ptq(model, batches)
    x = batches[2][0]
    simulated, deployed = kit.run(q, x), kit.export_and_run(q, tmp_path, batches, x)
    assert _sqnr(simulated, deployed) > 60


def test_save_and_load_give_the_same_model(kit, setup, tmp_path):
    model, batches = setup
    q, _ = kit.ptq(model, batches)
    x = batches[3][0]
    np.testing.assert_array_equal(kit.run(kit.save_and_load(q, tmp_path), x), kit.run(q, x))


def test_debug_bypass_returns_the_float_model(kit, setup):
    model, _ = setup
    cc = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(bypass=True))
    assert kit.ptq(model, None, core_config=cc) == (model, None)
