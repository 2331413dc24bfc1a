"""The trainable Keras quantizers: power-of-two / symmetric and uniform, for weights and activations,
trained with STE or LSQ (``TrainingMethod``), the twins of torch/trainable/quantizers.py. What they learn
is written once (trainable_infrastructure/quantizer_spec.py), the gradients too
(``quant_math.affine_fake_quantize_gradients``); here they are wrapped in ``keras.ops.custom_gradient``,
which runs on every Keras backend.

Defaults, as in MCT: STE weight quantizers keep the PTQ parameters fixed (the weights learn); STE
activation quantizers and every LSQ quantizer learn theirs (``freeze_quant_params`` overrides).
"""
from __future__ import annotations

from typing import Any

import keras
from keras import ops

from hwquant.core.numerics import quant_math
from hwquant.keras.trainable.base import (BaseKerasActivationTrainableQuantizer, BaseKerasTrainableQuantizer,
                                          BaseKerasWeightTrainableQuantizer)
from hwquant.trainable_infrastructure.common import QuantizationTarget, TrainingMethod, mark_quantizer
from hwquant.trainable_infrastructure.quantizer_spec import SYMMETRIC_METHODS, UNIFORM_METHODS

_PACKAGE = "hwquant"


def affine_fake_quantize(x: Any, grid: quant_math.AffineGrid, learn_rounding: bool = False,
                         scale_grad_factor: float = 1.0) -> Any:
    """Fake-quantize ``x`` onto ``grid`` (its scale and zero point tensors of the learned variables), with
    the straight-through gradient to x and the STE / LSQ gradients to the scale and the zero point."""
    qmin, qmax, axis = grid.qmin, grid.qmax, grid.axis

    @ops.custom_gradient
    def fake_quantize(x, scale, zero_point):
        grid = quant_math.AffineGrid(scale, zero_point, qmin, qmax, axis)
        y, _ = quant_math.affine_fake_quantize_forward(x, grid)

        def grad(*args, upstream=None):  # (torch passes the inputs and upstream=; tensorflow and jax the upstream)
            g = args[0] if upstream is None else upstream
            # the forward values are computed again, not kept: on the torch backend an output held by this
            # closure forms a reference cycle through the autograd graph that keeps every step's activations
            y_again, inside = quant_math.affine_fake_quantize_forward(x, grid)
            return quant_math.affine_fake_quantize_gradients(g, x, y_again, inside, scale, zero_point, axis, learn_rounding,
                                                             scale_grad_factor, True, True)
        return y, grad

    # a variable is read into a tensor first: TensorFlow's custom gradient would take it for a variable the
    # function closes over, whose gradient it must return separately
    x = ops.copy(x) if isinstance(x, keras.Variable) else ops.convert_to_tensor(x)
    return fake_quantize(x, ops.cast(grid.scale, x.dtype), ops.cast(grid.zero_point, x.dtype))


class TrainableAffineQuantizer(BaseKerasTrainableQuantizer):
    """A quantizer learning a symmetric / power-of-two threshold or a uniform scale and zero point
    (variables ``<name>_threshold``, or ``<name>_scale`` and ``<name>_zero_point``)."""

    def grid(self) -> quant_math.AffineGrid:
        self._check_initialized()
        return self.grid_of(self._variables)

    def __call__(self, inputs: Any, training: Any = True) -> Any:
        grid = self.grid()
        return affine_fake_quantize(inputs, grid, self.learn_rounding, self.scale_gradient_factor(tuple(inputs.shape), grid))


# ------------------------------------------------------------------------------ registered classes
def _registered(name: str, target: QuantizationTarget, methods: list, training: TrainingMethod) -> type:
    """The registered (and Keras-serializable) quantizer class ``name``, with the defaults of the module docstring."""
    weights = target == QuantizationTarget.Weights
    base = BaseKerasWeightTrainableQuantizer if weights else BaseKerasActivationTrainableQuantizer
    attributes = {"__module__": __name__, "freeze_by_default": weights and training == TrainingMethod.STE,
                  "learn_rounding": training == TrainingMethod.LSQ}
    cls = mark_quantizer(target, methods, training)(type(name, (TrainableAffineQuantizer, base), attributes))
    return keras.saving.register_keras_serializable(_PACKAGE)(cls)


_W, _A, _STE, _LSQ = QuantizationTarget.Weights, QuantizationTarget.Activation, TrainingMethod.STE, TrainingMethod.LSQ
STESymmetricWeightsTrainableQuantizer = _registered("STESymmetricWeightsTrainableQuantizer", _W, SYMMETRIC_METHODS, _STE)
LSQSymmetricWeightsTrainableQuantizer = _registered("LSQSymmetricWeightsTrainableQuantizer", _W, SYMMETRIC_METHODS, _LSQ)
STEUniformWeightsTrainableQuantizer = _registered("STEUniformWeightsTrainableQuantizer", _W, UNIFORM_METHODS, _STE)
LSQUniformWeightsTrainableQuantizer = _registered("LSQUniformWeightsTrainableQuantizer", _W, UNIFORM_METHODS, _LSQ)
STESymmetricActivationTrainableQuantizer = _registered("STESymmetricActivationTrainableQuantizer", _A, SYMMETRIC_METHODS, _STE)
LSQSymmetricActivationTrainableQuantizer = _registered("LSQSymmetricActivationTrainableQuantizer", _A, SYMMETRIC_METHODS, _LSQ)
STEUniformActivationTrainableQuantizer = _registered("STEUniformActivationTrainableQuantizer", _A, UNIFORM_METHODS, _STE)
LSQUniformActivationTrainableQuantizer = _registered("LSQUniformActivationTrainableQuantizer", _A, UNIFORM_METHODS, _LSQ)
