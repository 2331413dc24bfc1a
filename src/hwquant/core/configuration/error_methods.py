"""QuantizationErrorMethod: how a threshold or range is chosen (the error it minimizes)."""
from enum import IntEnum


class QuantizationErrorMethod(IntEnum):
    """How a quantization threshold / range is chosen: the error it minimizes.

    NOCLIPPING: min/max of the data; MSE / MAE: mean squared / absolute error; KL: KL divergence of the
    histograms; LP: L_p norm (p = QuantizationConfig.l_p_value); HMSE: Hessian-weighted MSE (GPTQ).
    """

    NOCLIPPING = 0
    MSE = 1
    MAE = 2
    KL = 4
    LP = 5
    HMSE = 6
    Lp = 5  # alias: spelling of the seed documents


ThresholdSelectionMethod = QuantizationErrorMethod  # older name of the same enum
