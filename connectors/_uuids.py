"""UUIDs as text: a page of 16-byte uuids, as the drivers give them, formatted at once as their canonical text."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["uuid_text"]

_HEX = b"0123456789abcdef"
# each byte's two hex digits, as one uint16 in memory order: a uuid's 16 bytes take 16 lookups, not 32 scatters
_HEX_PAIRS = np.frombuffer(bytes(d for i in range(256) for d in (_HEX[i >> 4], _HEX[i & 15])), dtype=np.uint16)
_GROUPS = ((0, 8), (9, 13), (14, 18), (19, 23), (24, 36))  # where a uuid's 32 hex digits go, in 5 groups


def uuid_text(array: pa.Array) -> pa.Array:
    """16-byte uuids (``fixed_size_binary(16)``, or an extension type on it; nulls kept) as their canonical
    lower-case text, ``6ba7b810-9dad-11d1-80b4-00c04fd430c8`` (``str(uuid.UUID)``, and how PostgreSQL and Cassandra
    print one), with numpy instead of a Python object per value."""
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if not len(array):
        return pa.array([], pa.string())
    total = array.offset + len(array)
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8, count=16 * total).reshape(total, 16)
    digits = np.take(_HEX_PAIRS, raw).view(np.uint8)
    text = np.full((total, 36), ord("-"), dtype=np.uint8)
    at = 0
    for start, end in _GROUPS:
        text[:, start:end] = digits[:, at:at + end - start]
        at += end - start
    offsets = np.arange(0, 36 * (total + 1), 36, dtype=np.int32)
    return pa.StringArray.from_buffers(len(array), pa.py_buffer(offsets), pa.py_buffer(text), array.buffers()[0],
                                       array.null_count, array.offset)
