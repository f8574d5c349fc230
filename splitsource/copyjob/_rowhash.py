"""Row hashes of Arrow data, computed a column at a time with numpy: what ``verify`` adds up on both sides.

A value's hash depends only on the value as its column's *plain storage* holds it (see
:func:`splitsource.sink._text.plain_storage`: temporal types as their integers), never on how the array is laid out
(a slice, a chunk, string or large string), so the source's reference rows turned into Arrow arrays by pyarrow and
the output's files read back by a reader hash alike exactly when their values are equal:

- integers and booleans by their 64-bit value, floats by their bits (every NaN alike; ``-0.0`` apart from ``0.0``),
  strings and binaries by a polynomial over their bytes and their length, decimals by their text;
- lists, sets and maps by their elements in order (a map is its list of key and value pairs), structs by their
  fields in order, null as a constant of its own at any depth;
- a row by its columns in order, each through the 64-bit mixer of SplitMix64.

A table's checksum is the sum modulo 2**64 of its row hashes together with the sum of a second mix of them: 128
bits, and the order of the rows does not matter. The hash is not cryptographic: it finds lost, duplicated and
changed rows, not a forger's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from splitsource.sink._text import plain_storage

__all__ = ["hash_array", "hash_rows", "lanes"]

_U64 = np.uint64
_MASK = (1 << 64) - 1
_NULL = 0x6A09E667F3BCC909  # constants of their own (SHA-512's first words): no plain value is built to hit them
_PRESENT = 0xBB67AE8584CAA73B
_STRING = 0x3C6EF372FE94F82B
_LIST = 0xA54FF53A5F1D36F1
_STRUCT = 0x510E527FADE682D1
_POSITION = 0x9B05688C2B3E6C1F
_SECOND_LANE = 0x1F83D9ABFB41BD6B
_BASE = 0x100000001B3  # the polynomial's base (FNV-1's prime): odd, so its powers never vanish modulo 2**64
_SLICE_BYTES = 1 << 24  # strings hashed 16 MiB of bytes at a time: the per-byte terms take 8 bytes each


def _const(value: int, n: int) -> np.ndarray:
    return np.full(n, value & _MASK, dtype=_U64)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on every element (a new array; uint64 arithmetic wraps modulo 2**64)."""
    x = x ^ (x >> _U64(30))
    x *= _U64(0xBF58476D1CE4E5B9)
    x ^= x >> _U64(27)
    x *= _U64(0x94D049BB133111EB)
    x ^= x >> _U64(31)
    return x


_tables: dict[int, np.ndarray] = {}


def _power_table(length: int, base: int = _BASE) -> np.ndarray:
    """``base ** k`` modulo 2**64 for k below at least ``length``."""
    powers = _tables.get(base)
    if powers is None or len(powers) < length:
        size = max(length, 2 * len(powers) if powers is not None else 0, 1024)
        factors = np.full(size, base, dtype=_U64)
        factors[0] = 1
        powers = _tables[base] = np.cumprod(factors, dtype=_U64)
    return powers


_INVERSE = pow(_BASE, -1, 1 << 64)  # _BASE is odd: it has an inverse modulo 2**64


def _segment_sums(terms: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The sum of ``terms[starts[i]:ends[i]]`` for every i (empty segments too), modulo 2**64."""
    running = np.zeros(len(terms) + 1, dtype=_U64)
    np.cumsum(terms, dtype=_U64, out=running[1:])
    sums: np.ndarray = running[ends] - running[starts]
    return sums


def _positions(lengths: np.ndarray, total: int) -> np.ndarray:
    """Each element's position inside its segment, for segments of ``lengths`` laid end to end."""
    starts = np.cumsum(lengths) - lengths
    positions: np.ndarray = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    return positions


def _hash_bytes(arr: pa.Array) -> np.ndarray:
    """Strings and binaries (of any offset width): a polynomial over each value's bytes, and its length."""
    n = len(arr)
    offset_type = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[arr.offset:arr.offset + n + 1].astype(np.int64)
    total = int(offsets[-1] - offsets[0]) if n else 0
    if total > _SLICE_BYTES and n > 1:
        half = n // 2
        return np.concatenate([_hash_bytes(arr.slice(0, half)), _hash_bytes(arr.slice(half))])
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None and total else np.zeros(0, np.uint8)
    data = data[offsets[0]:offsets[0] + total] if total else data[:0]
    lengths = np.diff(offsets)
    # sum of (byte + 1) * _BASE ** (its position in its value): each byte is weighted by the power of its position
    # in the whole buffer, and each value's sum multiplied by the inverse power of its start (exact modulo 2**64),
    # which spares a position per byte (a repeat and a gather over every byte: a fifth of verify's hashing)
    terms = (data.astype(_U64) + _U64(1)) * _power_table(total)[:total]
    relative = offsets - offsets[0]
    starts = relative[:-1]
    polynomial = _segment_sums(terms, starts, relative[1:]) * _power_table(total + 1, _INVERSE)[starts]
    return _mix(polynomial ^ _mix(lengths.astype(_U64) + _U64(_STRING)))


def _hash_segments(children: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Lists by their elements' hashes ``children`` (laid end to end, ``offsets`` relative to the first), in
    order: each element mixed with its position, summed, and mixed with the list's length."""
    lengths = np.diff(offsets)
    positions = _positions(lengths, len(children)).astype(_U64)
    terms = _mix(children ^ (positions * _U64(_POSITION)))
    return _mix(_segment_sums(terms, offsets[:-1], offsets[1:]) + _mix(lengths.astype(_U64) + _U64(_LIST)))


def _combine(hashes: Sequence[np.ndarray], n: int, seed: int) -> np.ndarray:
    out = _const(seed, n)
    for h in hashes:
        out = _mix(out * _U64(_POSITION) + h)
    return out


def _hash_plain(arr: pa.Array) -> np.ndarray:
    import pyarrow.compute as pc  # here: a copy's processes never need it (tests/splitsource/copyjob/test_imports.py)

    t = arr.type
    n = len(arr)
    if pa.types.is_null(t):
        return _const(_NULL, n)
    if pa.types.is_dictionary(t):
        return _hash_plain(arr.dictionary_decode())
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        values = pc.fill_null(arr, False if pa.types.is_boolean(t) else 0).to_numpy(zero_copy_only=False)
        bits = values.astype(_U64) if values.dtype == _U64 else values.astype(np.int64).view(_U64)
        h = _mix(bits ^ _U64(_PRESENT))
    elif pa.types.is_floating(t):
        values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
        bits = values.view(f"u{values.dtype.itemsize}").astype(_U64)
        h = _mix(np.where(np.isnan(values), _U64(_NULL ^ 1), bits) ^ _U64(_PRESENT))
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        h = _hash_bytes(arr)
    elif pa.types.is_fixed_size_binary(t):
        h = _hash_bytes(arr.cast(pa.binary()))
    elif pa.types.is_decimal(t):
        h = _hash_bytes(arr.cast(pa.string()))
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        first = int(offsets[0]) if n else 0
        children = arr.values.slice(first, int(offsets[-1]) - first if n else 0)
        h = _hash_segments(_hash_plain(children), offsets - first)
    elif pa.types.is_fixed_size_list(t):
        size = t.list_size
        children = arr.values.slice(arr.offset * size, n * size)
        h = _hash_segments(_hash_plain(children), np.arange(n + 1, dtype=np.int64) * size)
    elif pa.types.is_struct(t):
        h = _combine([_hash_plain(child) for child in arr.flatten()], n, _STRUCT)
    else:
        raise TypeError(f"verify cannot compare values of type {t}")
    if arr.null_count:
        h = np.where(arr.is_null().to_numpy(zero_copy_only=False), _U64(_NULL), h)
    return h


def hash_array(arr: pa.Array | pa.ChunkedArray, presence_only: bool = False) -> np.ndarray:
    """One 64-bit hash per value of ``arr`` (see the module's doc); ``presence_only``: of null or not only."""
    if isinstance(arr, pa.ChunkedArray):
        parts = [hash_array(chunk, presence_only) for chunk in arr.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=_U64)
    if presence_only:
        return np.where(arr.is_null().to_numpy(zero_copy_only=False), _U64(_NULL), _U64(_PRESENT))
    plain = plain_storage(arr.type)
    return _hash_plain(arr if plain == arr.type else arr.cast(plain))


def hash_rows(columns: Sequence[np.ndarray], n: int) -> np.ndarray:
    """Each row's hash from its columns' value hashes, in column order."""
    return _combine(columns, n, _STRUCT ^ _LIST)


def lanes(rows: np.ndarray) -> tuple[int, int]:
    """The two sums of a table's row hashes: the checksum's halves (each modulo 2**64)."""
    first = int(np.sum(rows, dtype=_U64)) if len(rows) else 0
    second = int(np.sum(_mix(rows ^ _U64(_SECOND_LANE)), dtype=_U64)) if len(rows) else 0
    return first, second
