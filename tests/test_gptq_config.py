"""GPTQ configuration objects: MCT 2.6's fields, defaults and rules."""
import pytest

import hwquant as mct
from hwquant.gptq import (GPTQHessianScoresConfig, GradientPTQConfig, GradualActivationQuantizationConfig,
                          QFractionLinearAnnealingConfig, RoundingType)


def test_enum_values_and_defaults():
    assert RoundingType.STE.value == 0 and RoundingType.SoftQuantizer.value == 1
    h = GPTQHessianScoresConfig(per_sample=True, hessians_num_samples=None)
    assert (h.norm_scores, h.log_norm, h.scale_log_norm, h.hessian_batch_size) == (False, False, False, 32)
    h = GPTQHessianScoresConfig(per_sample=False, hessians_num_samples=16, log_norm=False)
    assert (h.norm_scores, h.log_norm) == (True, False)
    policy = GradualActivationQuantizationConfig().q_fraction_scheduler_policy
    assert (policy.initial_q_fraction, policy.target_q_fraction, policy.start_step, policy.end_step) == (0, 1, 0, None)
    cfg = GradientPTQConfig(5, None, None, None, True, h, GradualActivationQuantizationConfig(), 10)
    assert cfg.rounding_type is RoundingType.SoftQuantizer and cfg.gptq_quantizer_params_override == {}
    assert GradientPTQConfig(5, None, None, None, False, None, None, 0.0, rounding_type=0).rounding_type is RoundingType.STE
    assert mct.gptq.GradientPTQConfig is GradientPTQConfig


def test_bad_values_are_refused_with_the_rule():
    with pytest.raises(ValueError, match="initial_q_fraction < target_q_fraction"):
        QFractionLinearAnnealingConfig(initial_q_fraction=0.5, target_q_fraction=0.5, start_step=0, end_step=None)
    with pytest.raises(ValueError, match="must be in \\[0, 1\\]"):
        QFractionLinearAnnealingConfig(initial_q_fraction=0, target_q_fraction=1.5, start_step=0, end_step=None)
    with pytest.raises(ValueError, match="start_step < end_step"):
        QFractionLinearAnnealingConfig(initial_q_fraction=0, target_q_fraction=1, start_step=5, end_step=5)
    with pytest.raises(ValueError, match="start_step\n.*must be an int >= 0"):
        QFractionLinearAnnealingConfig(initial_q_fraction=0, target_q_fraction=1, start_step=-1, end_step=None)
    with pytest.raises(ValueError, match="QFractionLinearAnnealingConfig"):
        GradualActivationQuantizationConfig(q_fraction_scheduler_policy={"initial_q_fraction": 0})
    with pytest.raises(ValueError, match="n_epochs\n.*must be an int >= 1"):
        GradientPTQConfig(0, None, None, None, True, None, None, 1.0)
    with pytest.raises(ValueError, match="regularization_factor\n.*must be >= 0"):
        GradientPTQConfig(1, None, None, None, True, None, None, -1.0)
    with pytest.raises(ValueError, match="loss\n.*callable"):
        GradientPTQConfig(1, "mse", None, None, True, None, None, 1.0)
    with pytest.raises(ValueError, match="GPTQHessianScoresConfig or None"):
        GradientPTQConfig(1, None, None, None, True, {"per_sample": True}, None, 1.0)
    with pytest.raises(ValueError, match="dict of quantizer constructor arguments"):
        GradientPTQConfig(1, None, None, None, True, None, None, 1.0, gptq_quantizer_params_override=[1])
    with pytest.raises(ValueError, match="hessian_batch_size\n.*must be an int >= 1"):
        GPTQHessianScoresConfig(per_sample=True, hessians_num_samples=None, hessian_batch_size=0)


def test_get_pytorch_gptq_config_defaults_and_choices():
    import torch
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=5)
    assert cfg.n_epochs == 5 and cfg.train_bias and cfg.rounding_type is RoundingType.SoftQuantizer
    assert isinstance(cfg.optimizer, torch.optim.Adam) and cfg.optimizer.defaults["lr"] == 3e-2
    assert cfg.optimizer_rest.defaults["lr"] == 1e-4
    assert isinstance(cfg.optimizer_bias, torch.optim.SGD) and cfg.optimizer_bias.defaults["momentum"] == 0.9
    assert cfg.hessian_weights_config.per_sample and cfg.regularization_factor == 10
    assert cfg.gradual_activation_quantization_config is not None
    plain = mct.gptq.get_pytorch_gptq_config(3, use_hessian_sample_attention=False, gradual_activation_quantization=False)
    assert plain.hessian_weights_config.hessians_num_samples == 256 and not plain.hessian_weights_config.per_sample
    assert plain.regularization_factor == 0.01 and plain.gradual_activation_quantization_config is None
    none = mct.gptq.get_pytorch_gptq_config(3, use_hessian_based_weights=False, use_hessian_sample_attention=False)
    assert none.hessian_weights_config is None
    sgd = torch.optim.SGD([torch.zeros(0)], lr=0.5)
    assert mct.gptq.get_pytorch_gptq_config(1, optimizer=sgd, regularization_factor=0.0).optimizer is sgd
    with pytest.raises(ValueError, match="needs use_hessian_based_weights=True"):
        mct.gptq.get_pytorch_gptq_config(1, use_hessian_based_weights=False)
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        mct.gptq.get_pytorch_gptq_config(1, optimizer="adam")
    with pytest.raises(TypeError, match="gradual_activation_quantization must be"):
        mct.gptq.get_pytorch_gptq_config(1, gradual_activation_quantization="yes")
    with pytest.raises(ValueError, match="n_epochs"):
        mct.gptq.get_pytorch_gptq_config(0)


def test_configs_edit_with_dataclasses_replace_as_in_mct():
    import dataclasses

    import hwquant as mct
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=2)
    assert dataclasses.is_dataclass(cfg)
    edited = dataclasses.replace(cfg, n_epochs=3, rounding_type=mct.gptq.RoundingType.STE)
    assert (edited.n_epochs, cfg.n_epochs, edited.rounding_type) == (3, 2, mct.gptq.RoundingType.STE)
    assert edited.optimizer is cfg.optimizer and isinstance(edited, type(cfg))
    with pytest.raises(ValueError, match="n_epochs"):  # replace re-validates
        dataclasses.replace(cfg, n_epochs=0)
    core = mct.core.CoreConfig()
    assert dataclasses.replace(core.quantization_config, z_threshold=8).z_threshold == 8
    assert "mixed_precision_config" in [f.name for f in dataclasses.fields(core)]
