"""MCT's names for hwquant's Keras classes, where MCT's module paths give them another name (the paths
themselves, mct.trainable_infrastructure.keras..., mct.qat.keras..., mct.gptq.keras..., mct.exporter.model_wrapper...,
are entries of the framework-free table hwquant/mct_paths.py), and `get_exportable_keras_model`.

The same classes under two names, not subclasses: a model made by `mct.qat` holds hwquant's quantizers,
and ``isinstance(q, STEWeightQATQuantizer)`` is true for it as in MCT.
"""
from __future__ import annotations

from typing import Any, Tuple

import keras

from hwquant.core.configuration.config import UserInformation
from hwquant.errors import ExportError
from hwquant.keras.gptq.quantizers import STESymmetricGPTQ
from hwquant.keras.quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper
from hwquant.keras.trainable import (BaseKerasWeightTrainableQuantizer,
                                     LSQSymmetricWeightsTrainableQuantizer, LSQUniformWeightsTrainableQuantizer,
                                     STESymmetricWeightsTrainableQuantizer, STEUniformWeightsTrainableQuantizer)
from hwquant.keras.trainable.model import trainable_quantizers

# mct.trainable_infrastructure: the wrapper holding trainable quantizers is hwquant's one wrapper
KerasTrainableQuantizationWrapper = KerasQuantizationWrapper
# mct.qat.keras.quantizer...: the weight QAT quantizers
BaseKerasQATWeightTrainableQuantizer = BaseKerasWeightTrainableQuantizer
STEWeightQATQuantizer = STESymmetricWeightsTrainableQuantizer        # power-of-two / symmetric, STE
STEUniformWeightQATQuantizer = STEUniformWeightsTrainableQuantizer
LSQWeightQATQuantizer = LSQSymmetricWeightsTrainableQuantizer        # power-of-two / symmetric, LSQ
LSQUniformWeightQATQuantizer = LSQUniformWeightsTrainableQuantizer
# mct.gptq.keras.quantizer.ste_rounding.symmetric_ste
STEWeightGPTQQuantizer = STESymmetricGPTQ


def get_exportable_keras_model(model: Any) -> Tuple[Any, UserInformation]:
    """(the exportable model, UserInformation) of a quantized Keras model.

    MCT builds this model from its internal graph; hwquant's facades return it already
    (`mct.ptq.keras_post_training_quantization`, `mct.gptq...`, `mct.qat...finalize`), so the model is
    checked and returned as it is: every wrapper and holder with inferable quantizers. A model still
    holding trainable quantizers (QAT) is refused: finalize it first."""
    if not isinstance(model, keras.Model):
        raise ExportError(f"get_exportable_keras_model takes the keras.Model a hwquant facade returns (hwquant has no "
                          f"MCT graph to build it from), got {type(model).__name__}")
    trainable = list(dict.fromkeys(layer.name for layer, _, _ in trainable_quantizers(model)))
    if trainable:
        raise ExportError(f"layers {trainable[:8]} hold trainable quantizers: call "
                          "mct.qat.keras_quantization_aware_training_finalize_experimental(model) first")
    if not any(isinstance(layer, (KerasQuantizationWrapper, KerasActivationQuantizationHolder)) for layer in model.layers):
        raise ExportError(f"the model '{model.name}' holds no quantization layers: quantize it first with "
                          "mct.ptq.keras_post_training_quantization")
    return model, UserInformation()
