"""A policy's global state as bytes, without pickle.

A state file may come from anywhere (a copied JOBDIR, a shared disk): loading it must never
run code, so pickle is out. This codec stores nested dicts (any scalar keys), lists, tuples,
None, bools, ints (any size), floats (NaN and infinities too), strings and numpy arrays (in
the ``.npy`` format, read back with ``allow_pickle=False``); numpy scalars become Python
numbers. Anything else is refused with ``TypeError`` when encoding.

Layout: ``b"SWS1"``, the length of a JSON document (8 bytes, little-endian), the JSON document
(the tree, arrays replaced by their index), then each array as (8-byte length, .npy bytes).
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import numpy as np

MAGIC = b"SWS1"


class StateDecodeError(ValueError):
    """The bytes are not a state written by :func:`encode`."""


def encode(obj: Any) -> bytes:
    arrays: list[bytes] = []

    def tree(x: Any) -> Any:
        if x is None or isinstance(x, bool | str):
            return x
        if isinstance(x, int | float):
            return x
        if isinstance(x, np.generic):
            return tree(x.item())
        if isinstance(x, np.ndarray):
            if x.dtype.hasobject:
                raise TypeError("arrays of Python objects cannot be stored")
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(x), allow_pickle=False)
            arrays.append(buf.getvalue())
            return {"a": len(arrays) - 1}
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x):
                return {"d": {k: tree(v) for k, v in x.items()}}
            return {"m": [[tree(k), tree(v)] for k, v in x.items()]}
        if isinstance(x, tuple):
            return {"t": [tree(v) for v in x]}
        if isinstance(x, list):
            return {"l": [tree(v) for v in x]}
        raise TypeError(f"cannot store an object of type {type(x).__name__}")

    doc = json.dumps(tree(obj), separators=(",", ":"), allow_nan=True).encode()
    out = [MAGIC, struct.pack("<Q", len(doc)), doc]
    for blob in arrays:
        out += [struct.pack("<Q", len(blob)), blob]
    return b"".join(out)


def decode(data: bytes) -> Any:
    data = bytes(data)
    if data[:4] != MAGIC or len(data) < 12:
        raise StateDecodeError("not a scrapy-whittle state (bad magic)")
    try:
        (n,) = struct.unpack_from("<Q", data, 4)
        doc = json.loads(data[12:12 + n])
        pos = 12 + n
        arrays = []
        while pos < len(data):
            (size,) = struct.unpack_from("<Q", data, pos)
            arrays.append(np.load(io.BytesIO(data[pos + 8:pos + 8 + size]),
                                  allow_pickle=False))
            pos += 8 + size
    except (ValueError, struct.error, OSError) as exc:
        raise StateDecodeError(f"damaged state: {exc}") from None

    def build(x: Any) -> Any:
        if not isinstance(x, dict):
            return x
        if "a" in x:
            return arrays[x["a"]]
        if "d" in x:
            return {k: build(v) for k, v in x["d"].items()}
        if "m" in x:
            return {build(k): build(v) for k, v in x["m"]}
        if "t" in x:
            return tuple(build(v) for v in x["t"])
        if "l" in x:
            return [build(v) for v in x["l"]]
        raise StateDecodeError(f"damaged state: unknown node {sorted(x)}")

    try:
        return build(doc)
    except (IndexError, KeyError, TypeError) as exc:
        raise StateDecodeError(f"damaged state: {exc}") from None
