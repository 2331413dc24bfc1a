"""The representative dataset of a Keras model: each batch checked and converted to float32 numpy
arrays (any backend's tensors, or numpy arrays); the passes are core/representative_data.py's."""
from __future__ import annotations

from typing import Any, List

import keras
import numpy as np

from hwquant.core.representative_data import BaseRepresentativeData, RepresentativeDataError


class KerasRepresentativeData(BaseRepresentativeData):

    def _check(self, batch: Any, index: int) -> List[np.ndarray]:
        if not isinstance(batch, (list, tuple)):
            batch = [batch]
        try:
            arrays = [np.asarray(keras.ops.convert_to_numpy(x)) for x in batch]
        except Exception as e:  # noqa: BLE001 - anything that is not an array
            raise RepresentativeDataError(f"batch {index} holds {[type(x).__name__ for x in batch]}; expected arrays "
                                          f"or tensors, one per model input ({e})") from e
        if self.n_inputs is not None and len(arrays) != self.n_inputs:
            raise RepresentativeDataError(f"batch {index} has {len(arrays)} input(s) but the model takes "
                                          f"{self.n_inputs}; yield a list with one array per model input")
        if self._shapes is None:
            self._shapes = [a.shape[1:] for a in arrays]
        elif [a.shape[1:] for a in arrays] != self._shapes:
            self.uniform_shapes = False
        for k, a in enumerate(arrays):
            if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
                raise RepresentativeDataError(f"input {k} of batch {index} contains NaN or inf values; clean or "
                                              "normalise the representative data")
        return [a.astype(np.float32) if np.issubdtype(a.dtype, np.floating) else a for a in arrays]
