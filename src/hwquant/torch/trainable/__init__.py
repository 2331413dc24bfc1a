"""Trainable quantizers for PyTorch (importing this registers them)."""
from hwquant.torch.trainable.base import BasePytorchActivationTrainableQuantizer, BasePytorchTrainableQuantizer  # noqa: F401
from hwquant.torch.trainable.quantizers import (LSQSymmetricActivationTrainableQuantizer,  # noqa: F401
                                                LSQSymmetricWeightsTrainableQuantizer,
                                                LSQUniformActivationTrainableQuantizer,
                                                LSQUniformWeightsTrainableQuantizer,
                                                STESymmetricActivationTrainableQuantizer,
                                                STESymmetricWeightsTrainableQuantizer,
                                                STEUniformActivationTrainableQuantizer,
                                                STEUniformWeightsTrainableQuantizer)
