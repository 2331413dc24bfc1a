"""z_threshold: outliers beyond mean +- z * std are left out of the activation parameter search,
end to end through the pipeline (the statistics and parameter modules do the work)."""
import pytest
import torch
from torch import nn

from hwquant.constants import THRESHOLD
from hwquant.core.pipeline.candidates import select_base_configs
from hwquant.core.configuration.config import CoreConfig, QuantizationConfig, QuantizationErrorMethod
from hwquant.core.pipeline.stages import calibrate, compute_parameters, prepare
from hwquant.core.pipeline.state import PipelineState
from hwquant.torch.adapter import PytorchAdapter
from hwquant.torch.capture.routes import capture
from hwquant.tpc.platforms import get_target_platform_capabilities


def _input_threshold(z, error_method=QuantizationErrorMethod.NOCLIPPING):
    torch.manual_seed(0)
    batches = []
    for _ in range(2):
        x = torch.randn(8, 3, 8, 8)
        x[0, 0, 0, 0] = 60.0  # one outlier per batch
        batches.append([x])
    qc = QuantizationConfig(z_threshold=z, activation_error_method=error_method)
    model = nn.Sequential(nn.Conv2d(3, 4, 3)).eval()
    state = PipelineState(capture(model, batches[0]), CoreConfig(quantization_config=qc), PytorchAdapter(),
                          get_target_platform_capabilities())
    prepare(state)
    calibrate(state, batches)
    select_base_configs(state.graph)
    compute_parameters(state)
    inp = state.graph.input_nodes[0]
    return inp.final_config.activation_quantization_cfg.activation_quantization_params[THRESHOLD]


def test_outliers_set_the_threshold_without_z_threshold():
    assert _input_threshold(float("inf")) == 64.0


@pytest.mark.parametrize("z", [3.0, 5.0])
def test_z_threshold_removes_the_outliers(z):
    t = _input_threshold(z)
    # the power of two above mean + z * std (std ~ 1.8 with the outliers in it), far below the outliers
    assert 4.0 <= t <= 16.0
    assert _input_threshold(z, QuantizationErrorMethod.MSE) <= t
