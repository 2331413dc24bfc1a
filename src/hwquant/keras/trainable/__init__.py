"""Keras 3's trainable quantizers (QAT, GPTQ): their base classes and the STE / LSQ quantizers."""
from hwquant.keras.trainable.base import (BaseKerasActivationTrainableQuantizer,  # noqa: F401
                                          BaseKerasTrainableQuantizer, BaseKerasWeightTrainableQuantizer)
from hwquant.keras.trainable.quantizers import (LSQSymmetricActivationTrainableQuantizer,  # noqa: F401
                                                LSQSymmetricWeightsTrainableQuantizer,
                                                LSQUniformActivationTrainableQuantizer, LSQUniformWeightsTrainableQuantizer,
                                                STESymmetricActivationTrainableQuantizer,
                                                STESymmetricWeightsTrainableQuantizer,
                                                STEUniformActivationTrainableQuantizer, STEUniformWeightsTrainableQuantizer)
