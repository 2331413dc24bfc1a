"""Reading a Paddle inference model's weights without Paddle: the tensors of a combined params file (.pdiparams)
and the names of its .pdiparams.info pickle (unpickled with every class refused)."""
from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np

from ._protobuf import _pb_fields, _pb_varint


def read_paddle_params(path: Path) -> list[np.ndarray]:
    """Tensors of a Paddle combined-params file (.pdiparams), in file order.

    Each record is a serialised LoDTensor: uint32 version, uint64 LoD level count (+ levels),
    uint32 tensor version, int32 TensorDesc size, TensorDesc protobuf (1: dtype, 2: dims), raw data.
    """
    dtypes = {5: np.float32, 6: np.float64, 2: np.int32, 3: np.int64, 4: np.float16}
    b, i, out = path.read_bytes(), 0, []
    while i < len(b):
        i += 4
        (n_lod,) = struct.unpack_from("<Q", b, i)
        i += 8
        for _ in range(n_lod):
            (sz,) = struct.unpack_from("<Q", b, i)
            i += 8 + sz
        i += 4
        (dsz,) = struct.unpack_from("<i", b, i)
        i += 4
        desc = _pb_fields(b[i:i + dsz])
        i += dsz
        dtype = np.dtype(dtypes[[v for f, v in desc if f == 1][0]])
        dims = []
        for f, v in desc:
            if f == 2:
                if isinstance(v, int):
                    dims.append(v)
                else:  # packed
                    j = 0
                    while j < len(v):
                        d, j = _pb_varint(v, j)
                        dims.append(d)
        count = int(np.prod(dims)) if dims else 1
        out.append(np.frombuffer(b, dtype=dtype, count=count, offset=i).reshape(dims).copy())
        i += count * dtype.itemsize
    return out


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # the .info file holds only dicts, strings and bools
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in .pdiparams.info")


def paddle_state_dict(model_dir: Path) -> dict[str, np.ndarray]:
    """{structured name (e.g. 'backbone.conv1.conv.weight'): array} of a Paddle inference model.

    save_inference_model writes the persistable variables sorted by their Paddle names; the
    .pdiparams.info pickle maps each Paddle name to the layer attribute path it belongs to."""
    with open(model_dir / "inference.pdiparams.info", "rb") as f:
        info = _SafeUnpickler(f).load()
    arrays = read_paddle_params(model_dir / "inference.pdiparams")
    if len(arrays) != len(info):
        raise RuntimeError(f"{model_dir}: {len(arrays)} tensors but {len(info)} names")
    return {info[name]["structured_name"]: a for name, a in zip(sorted(info), arrays)}
