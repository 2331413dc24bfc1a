"""Trainable quantizers for PyTorch (importing this registers them)."""
from hwquant.trainable_infrastructure.pytorch.base import (BasePytorchActivationTrainableQuantizer,  # noqa: F401
                                                         BasePytorchTrainableQuantizer)
from hwquant.trainable_infrastructure.pytorch.quantizers import (  # noqa: F401
    LSQSymmetricActivationTrainableQuantizer, LSQSymmetricWeightsTrainableQuantizer,
    LSQUniformActivationTrainableQuantizer, LSQUniformWeightsTrainableQuantizer,
    STESymmetricActivationTrainableQuantizer, STESymmetricWeightsTrainableQuantizer,
    STEUniformActivationTrainableQuantizer, STEUniformWeightsTrainableQuantizer)
