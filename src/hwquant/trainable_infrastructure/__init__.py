"""`mct.trainable_infrastructure`: configuration of trainable quantizers (QAT, GPTQ)."""
from hwquant.trainable_infrastructure.config import (TrainableQuantizerActivationConfig,  # noqa: F401
                                                     TrainableQuantizerCandidateConfig,
                                                     TrainableQuantizerWeightsConfig)
