"""The trainable Keras quantizers: power-of-two / symmetric and uniform, for weights and activations,
trained with STE or LSQ (``TrainingMethod``), the twins of torch/trainable/quantizers.py. What they learn
is written once (trainable_infrastructure/quantizer_spec.py), the gradients too
(``quant_math.affine_fake_quantize_gradients``); here they are wrapped in one torch autograd Function on
Keras' torch backend (keras/trainable/torch_fake_quant.py: that backend runs the step eagerly, so each
operation counts) and in ``keras.ops.custom_gradient`` on the others. On TensorFlow a symmetric /
power-of-two STE quantizer trains through TensorFlow's fused fake-quantization operations instead, as MCT's
Keras quantizers do (keras/trainable/tf_fake_quant.py: one pass each way where keras.ops take a dozen);
inference (``training=False``) and the finalized model keep quant_math's arithmetic.

Defaults, as in MCT's Keras QAT: STE quantizers keep the PTQ parameters fixed (the weights learn; a learned
activation threshold costs every step its gradient and its optimizer update, and did not help accuracy in
the QAT benchmark), every LSQ quantizer learns them (``freeze_quant_params`` overrides either way, e.g.
``QATConfig(activation_quantizer_params_override={"freeze_quant_params": False})``). hwquant's PyTorch STE
activation quantizers learn their thresholds, as MCT's PyTorch ones.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from hwquant.constants import THRESHOLD
from hwquant.core.numerics import quant_math
from hwquant.keras.trainable.base import (BaseKerasActivationTrainableQuantizer, BaseKerasTrainableQuantizer,
                                          BaseKerasWeightTrainableQuantizer)
from hwquant.tpc.enums import QuantizationMethod
from hwquant.trainable_infrastructure.common import QuantizationTarget, TrainingMethod, mark_quantizer
from hwquant.trainable_infrastructure.quantizer_spec import SYMMETRIC_METHODS, UNIFORM_METHODS

_PACKAGE = "hwquant"


def affine_fake_quantize(x: Any, grid: quant_math.AffineGrid, learn_rounding: bool = False,
                         scale_grad_factor: float = 1.0, learns: bool = True) -> Any:
    """Fake-quantize ``x`` onto ``grid`` (its scale and zero point tensors of the learned variables; a python
    zero point 0 for a symmetric grid, which then costs no addition), with the straight-through gradient to x
    and the STE / LSQ gradients to the scale and the zero point (``learns``: whether any of them is trained;
    on the torch backend autograd says it itself)."""
    qmin, qmax, axis = grid.qmin, grid.qmax, grid.axis
    symmetric = isinstance(grid.zero_point, (int, float)) and grid.zero_point == 0
    if keras.backend.backend() == "torch":  # one autograd Function: Keras' torch backend runs the step eagerly
        from hwquant.keras.trainable import torch_fake_quant

        x = x.value if isinstance(x, keras.Variable) else ops.convert_to_tensor(x)
        return torch_fake_quant.affine_fake_quantize(x, ops.cast(grid.scale, x.dtype),
                                                     None if symmetric else ops.cast(grid.zero_point, x.dtype),
                                                     qmin, qmax, axis, learn_rounding, scale_grad_factor)

    def gradients(g, x, y, inside, scale, zero_point):
        gx, gs, gz = quant_math.affine_fake_quantize_gradients(g, x, y, inside, scale, zero_point, axis, learn_rounding,
                                                               scale_grad_factor, learns, learns and not symmetric)
        return gx, (ops.zeros_like(scale) if gs is None else gs), (ops.zeros_like(scale) if gz is None else gz)

    # (a traced step keeps the forward values for the backward pass: nothing is computed twice)
    if symmetric:
        @ops.custom_gradient
        def fake_quantize(x, scale):
            y, inside = quant_math.affine_fake_quantize_forward(x, quant_math.AffineGrid(scale, 0.0, qmin, qmax, axis))

            def grad(*args, upstream=None):  # (torch passes the inputs and upstream=; tensorflow and jax the upstream)
                return gradients(args[0] if upstream is None else upstream, x, y, inside, scale, None)[:2]
            return y, grad
    else:
        @ops.custom_gradient
        def fake_quantize(x, scale, zero_point):
            y, inside = quant_math.affine_fake_quantize_forward(x, quant_math.AffineGrid(scale, zero_point, qmin, qmax, axis))

            def grad(*args, upstream=None):
                return gradients(args[0] if upstream is None else upstream, x, y, inside, scale, zero_point)
            return y, grad

    # a variable is read into a tensor first: TensorFlow's custom gradient would take it for a variable the
    # function closes over, whose gradient it must return separately
    x = ops.copy(x) if isinstance(x, keras.Variable) else ops.convert_to_tensor(x)
    scale = ops.cast(grid.scale, x.dtype)
    return fake_quantize(x, scale) if symmetric else fake_quantize(x, scale, ops.cast(grid.zero_point, x.dtype))


class TrainableAffineQuantizer(BaseKerasTrainableQuantizer):
    """A quantizer learning a symmetric / power-of-two threshold or a uniform scale and zero point
    (variables ``<name>_threshold``, or ``<name>_scale`` and ``<name>_zero_point``)."""

    def grid(self) -> quant_math.AffineGrid:
        self._check_initialized()
        return self.grid_of(self._variables)

    def __call__(self, inputs: Any, training: Any = True) -> Any:
        if training is True and self.symmetric and not self.learn_rounding and keras.backend.backend() == "tensorflow":
            from hwquant.keras.trainable import tf_fake_quant

            if tf_fake_quant.takes(inputs, self.num_bits):  # (TensorFlow's fused operations, as MCT trains)
                self._check_initialized()
                return tf_fake_quant.symmetric_fake_quantize(
                    inputs, self._variables[THRESHOLD], self.min_threshold, self.method == QuantizationMethod.POWER_OF_TWO,
                    self.num_bits, self.signed, self.channel_axis)
        if self.symmetric and keras.backend.backend() == "torch":
            grid = self._torch_symmetric_grid()
        else:
            grid = self.grid()
        if self.symmetric:  # (its zero point is 0: no addition and subtraction of zeros over the whole tensor)
            grid = dataclasses.replace(grid, zero_point=0.0)
        return affine_fake_quantize(inputs, grid, self.learn_rounding, self.scale_gradient_factor(tuple(inputs.shape), grid),
                                    any(v.trainable for v in self._variables.values()))


    def _torch_symmetric_grid(self) -> quant_math.AffineGrid:
        """``grid()`` of a symmetric / power-of-two quantizer on Keras' torch backend, in torch's operations
        (keras/trainable/torch_fake_quant.py ``symmetric_scale``: the same values and gradients)."""
        from hwquant.keras.trainable import torch_fake_quant

        self._check_initialized()
        n = self.num_bits
        qmin, qmax = (-2 ** (n - 1), 2 ** (n - 1) - 1) if self.signed else (0, 2 ** n - 1)
        scale = torch_fake_quant.symmetric_scale(self._variables[THRESHOLD].value, self.min_threshold,
                                                 self.method == QuantizationMethod.POWER_OF_TWO,
                                                 2.0 ** (n - 1 if self.signed else n))
        return quant_math.AffineGrid(scale, 0.0, qmin, qmax, self.channel_axis)


# ------------------------------------------------------------------------------ registered classes
def _registered(name: str, target: QuantizationTarget, methods: list, training: TrainingMethod) -> type:
    """The registered (and Keras-serializable) quantizer class ``name``, with the defaults of the module docstring."""
    weights = target == QuantizationTarget.Weights
    base = BaseKerasWeightTrainableQuantizer if weights else BaseKerasActivationTrainableQuantizer
    attributes = {"__module__": __name__, "freeze_by_default": training == TrainingMethod.STE,
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
