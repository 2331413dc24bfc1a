"""Trainable quantizers for PyTorch (importing this registers them)."""
from hwquant.torch.trainable.base import BasePytorchActivationTrainableQuantizer, BasePytorchTrainableQuantizer  # noqa: F401
from hwquant.torch.trainable.quantizers import (  # noqa: F401
                                          LSQSymmetricActivationTrainableQuantizer,
                                          LSQSymmetricWeightsTrainableQuantizer,
                                          LSQUniformActivationTrainableQuantizer,
                                          LSQUniformWeightsTrainableQuantizer,
                                          STESymmetricActivationTrainableQuantizer,
                                          STESymmetricWeightsTrainableQuantizer,
                                          STEUniformActivationTrainableQuantizer,
                                          STEUniformWeightsTrainableQuantizer,
)
