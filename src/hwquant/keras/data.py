"""The representative dataset of a Keras model: each batch checked and converted to float32 numpy
arrays (any backend's tensors, or numpy arrays); the passes are core/pipeline/representative_data.py's."""
from __future__ import annotations

from typing import Any, List

import keras
import numpy as np

from hwquant.core.pipeline.representative_data import BaseRepresentativeData, RepresentativeDataError


class KerasRepresentativeData(BaseRepresentativeData):

    def _check(self, batch: Any, index: int) -> List[np.ndarray]:
        if not isinstance(batch, (list, tuple)):
            batch = [batch]
        try:
            arrays = [np.asarray(keras.ops.convert_to_numpy(x)) for x in batch]
        except Exception as e:  # noqa: BLE001 - anything that is not an array
            raise RepresentativeDataError(f"batch {index} holds {[type(x).__name__ for x in batch]}; expected arrays "
                                          f"or tensors, one per model input ({e})") from e
        self._check_count_and_shapes(index, [a.shape for a in arrays], "array")
        self._check_finite(index, (not np.issubdtype(a.dtype, np.floating) or bool(np.isfinite(a).all()) for a in arrays))
        return [a.astype(np.float32) if np.issubdtype(a.dtype, np.floating) else a for a in arrays]
