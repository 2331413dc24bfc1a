"""A minimal protobuf wire-format reader (varints and fields), enough for the TensorDesc records of Paddle's
params files (paddle_params.py)."""
from __future__ import annotations


def _pb_varint(b: bytes, i: int):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _pb_fields(b: bytes):
    """Minimal protobuf wire-format reader: [(field number, value)] (ints or raw bytes)."""
    i, out = 0, []
    while i < len(b):
        key, i = _pb_varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _pb_varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        elif wt == 2:
            n, i = _pb_varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        out.append((f, v))
    return out
