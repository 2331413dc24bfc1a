"""`mct.trainable_infrastructure`: trainable quantizers (QAT, GPTQ), their configs and registry.

The configs and the registry are framework-free; each framework's quantizers load on first use
(`mct.trainable_infrastructure.BasePytorchTrainableQuantizer`: hwquant.torch.trainable;
`BaseKerasTrainableQuantizer`: hwquant.keras.trainable). The STE / LSQ quantizers' names are the torch
classes here; the Keras ones of the same names are in hwquant.keras.trainable.
"""
from hwquant.lazy import lazy_table
from hwquant.trainable_infrastructure.common import (QuantizationTarget, TrainingMethod, VariableGroup,  # noqa: F401
                                                     get_trainable_quantizer_class, mark_quantizer,
                                                     registered_quantizers)
from hwquant.trainable_infrastructure.config import (TrainableQuantizerActivationConfig,  # noqa: F401
                                                     TrainableQuantizerCandidateConfig, TrainableQuantizerWeightsConfig)

_TORCH = "hwquant.torch.trainable"
__getattr__, __dir__ = lazy_table(__name__, {
    **{name: _TORCH for name in (
        "BasePytorchTrainableQuantizer", "BasePytorchActivationTrainableQuantizer",
        "LSQSymmetricActivationTrainableQuantizer", "LSQSymmetricWeightsTrainableQuantizer",
        "LSQUniformActivationTrainableQuantizer", "LSQUniformWeightsTrainableQuantizer",
        "STESymmetricActivationTrainableQuantizer", "STESymmetricWeightsTrainableQuantizer",
        "STEUniformActivationTrainableQuantizer", "STEUniformWeightsTrainableQuantizer")},
    **{name: "hwquant.keras.trainable" for name in (
        "BaseKerasTrainableQuantizer", "BaseKerasActivationTrainableQuantizer", "BaseKerasWeightTrainableQuantizer")},
    "KerasTrainableQuantizationWrapper": "hwquant.keras.mct_paths",
}, globals())
