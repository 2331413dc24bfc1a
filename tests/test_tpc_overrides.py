"""The seed's QuantizationConfig fields override the TPC."""
import logging

from hwquant.constants import KERNEL_ATTR
from hwquant.core.configuration.config import QuantizationConfig
from hwquant.core.configuration.tpc_overrides import apply_quantization_config_overrides
from hwquant.logger import logger, set_log_folder
from hwquant.tpc import QuantizationMethod, get_target_platform_capabilities


def all_configs(tpc):
    yield from tpc.default_qco.quantization_configurations
    for s in tpc.operator_set:
        if s.qc_options:
            yield from s.qc_options.quantization_configurations


def test_no_override_returns_the_same_tpc():
    tpc = get_target_platform_capabilities("4.0")
    assert apply_quantization_config_overrides(tpc, QuantizationConfig()) is tpc


def test_bit_width_and_method_overrides_apply_everywhere_and_fix_the_options():
    tpc = get_target_platform_capabilities("4.0")
    qc = QuantizationConfig(activation_n_bits=6, weights_n_bits=7,
                            activation_quantization_method=QuantizationMethod.SYMMETRIC,
                            weights_quantization_method=QuantizationMethod.UNIFORM,
                            weights_per_channel_threshold=False)
    new = apply_quantization_config_overrides(tpc, qc)
    for cfg in all_configs(new):
        assert cfg.activation_n_bits == 6 and cfg.activation_quantization_method is QuantizationMethod.SYMMETRIC
        kernel = cfg.attr_weights_configs_mapping.get(KERNEL_ATTR)
        if kernel:
            assert (kernel.weights_n_bits, kernel.weights_quantization_method, kernel.weights_per_channel_threshold) \
                == (7, QuantizationMethod.UNIFORM, False)
    assert len(new.get_config_options_by_operators_set("Conv").quantization_configurations) == 1
    assert [f.name for f in new.fusing_patterns] == [f.name for f in tpc.fusing_patterns]
    # the TPC's decision of which ops are quantized stays
    assert not new.get_config_options_by_operators_set("Reshape").base_config.enable_activation_quantization


def test_disabling_quantization():
    tpc = get_target_platform_capabilities("4.0")
    new = apply_quantization_config_overrides(tpc, QuantizationConfig(enable_weights_quantization=False,
                                                                      enable_activation_quantization=False))
    for cfg in all_configs(new):
        assert not cfg.enable_activation_quantization
        assert not cfg.default_weight_attr_config.enable_weights_quantization
        assert all(not a.enable_weights_quantization for a in cfg.attr_weights_configs_mapping.values())
    # mixed-precision options are kept (they still differ), only edited
    assert len(new.get_config_options_by_operators_set("Conv").quantization_configurations) == 6


def test_set_log_folder_writes_the_toolkit_log(tmp_path):
    path = set_log_folder(tmp_path / "logs")
    logger.info("calibration started")
    for h in logger.handlers:
        h.flush()
    assert path.parent == tmp_path / "logs" and "calibration started" in path.read_text()
    second = set_log_folder(tmp_path / "other", level=logging.WARNING)
    logger.info("not written at INFO")
    logger.warning("written")
    for h in logger.handlers:
        h.flush()
    text = second.read_text()
    assert "written" in text and "not written" not in text
    assert "written" not in path.read_text()


def test_set_log_folder_on_a_file_path_fails_clearly(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    import pytest
    with pytest.raises(ValueError, match="cannot create log folder"):
        set_log_folder(blocker / "logs")
