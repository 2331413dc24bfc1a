"""`mct.trainable_infrastructure`: trainable quantizers (QAT, GPTQ), their configs and registry.

The configs and the registry are framework-free; the PyTorch quantizers load on first use
(`mct.trainable_infrastructure.BasePytorchTrainableQuantizer`), so `import hwquant` needs no torch.
"""
from hwquant.trainable_infrastructure.common import (QuantizationTarget, TrainingMethod,  # noqa: F401
                                                     VariableGroup, get_trainable_quantizer_class,
                                                     mark_quantizer, registered_quantizers)
from hwquant.trainable_infrastructure.config import (TrainableQuantizerActivationConfig,  # noqa: F401
                                                     TrainableQuantizerCandidateConfig,
                                                     TrainableQuantizerWeightsConfig)


def __getattr__(name):
    if not name.startswith("_") and name != "pytorch":
        import importlib
        pytorch = importlib.import_module("hwquant.trainable_infrastructure.pytorch")
        if hasattr(pytorch, name):
            return getattr(pytorch, name)
    raise AttributeError(f"module 'hwquant.trainable_infrastructure' has no attribute {name!r}")
