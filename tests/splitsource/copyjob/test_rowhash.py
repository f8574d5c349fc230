"""verify's row hashes: a value hashes alike however Arrow lays it out, and unlike every other value we try."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from splitsource.copyjob._rowhash import hash_array, hash_rows, lanes

CASES: list[tuple[pa.DataType, list[Any]]] = [
    (pa.int64(), [0, 1, -1, 2**63 - 1, -(2**63), None]),
    (pa.int8(), [0, 1, -1, 127, None]),
    (pa.bool_(), [True, False, None]),
    (pa.float64(), [0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), 5e-324, None]),
    (pa.float32(), [0.0, -0.0, 0.1, float("nan"), None]),
    (pa.string(), ["", "a", "b", "ab", "ba", "a\x00", "\u2028", "é" * 300, None]),
    (pa.binary(), [b"", b"\x00", b"\x00\x00", b"\x01", b"x" * 5000, None]),
    (pa.timestamp("us", tz="UTC"), [0, 1, -1, 10**17, None]),
    (pa.date32(), [0, 1, -719_162, None]),
    (pa.list_(pa.int32()), [[], [1], [1, 2], [2, 1], [None], [None, None], [0], None]),
    (pa.list_(pa.string()), [[], [""], ["", ""], ["ab"], ["a", "b"], ["b", "a"], None]),
    (pa.map_(pa.string(), pa.int64()), [[], [("a", 1)], [("a", 2)], [("b", 1)], [("a", 1), ("b", 2)],
                                        [("b", 2), ("a", 1)], [("a", None)], None]),
    (pa.struct([("x", pa.int64()), ("y", pa.string())]),
     [{"x": 1, "y": "a"}, {"x": 1, "y": None}, {"x": None, "y": "a"}, {"x": None, "y": None}, {"x": 2, "y": "a"},
      None]),
    (pa.list_(pa.list_(pa.int64())), [[[1, 2]], [[1], [2]], [[1], [], [2]], [[], [1, 2]], [[]], [], None]),
]


@pytest.mark.parametrize(("t", "values"), CASES, ids=[str(t) for t, _ in CASES])
def test_distinct_values_hash_apart_and_equal_values_alike_in_any_layout(t: pa.DataType, values: list[Any]) -> None:
    arr = pa.array(values * 3, t)
    h = hash_array(arr)
    n = len(values)
    assert len(set(h[:n].tolist())) == n, f"two distinct values of {t} hash alike"
    assert (h[:n] == h[n:2 * n]).all() and (h[:n] == h[2 * n:]).all()
    for start, length in ((1, n), (n - 1, n + 2), (2 * n, n)):  # slices keep their values' hashes
        assert (hash_array(arr.slice(start, length)) == h[start:start + length]).all(), (start, length)
    chunked = pa.chunked_array([arr.slice(0, 2), arr.slice(2, n), arr.slice(n + 2)])
    assert (hash_array(chunked) == h).all()


def test_the_layout_of_a_type_does_not_matter_its_values_do() -> None:
    strings = ["", "a", "bc", None]
    assert (hash_array(pa.array(strings, pa.string())) == hash_array(pa.array(strings, pa.large_string()))).all()
    assert (hash_array(pa.array([b"ab"], pa.binary(2))) == hash_array(pa.array([b"ab"], pa.binary()))).all()
    lists = [[1, 2], None, []]
    assert (hash_array(pa.array(lists, pa.list_(pa.int64())))
            == hash_array(pa.array(lists, pa.large_list(pa.int64())))).all()
    as_dictionary = pa.array(["x", "y", "x", None]).dictionary_encode()
    assert (hash_array(as_dictionary) == hash_array(pa.array(["x", "y", "x", None]))).all()


def test_a_volatile_column_hashes_only_whether_it_is_null() -> None:
    h = hash_array(pa.array([1, 2, None, 3]), presence_only=True)
    assert h[0] == h[1] == h[3] != h[2]


def test_the_checksum_finds_a_changed_a_moved_and_a_duplicated_value_but_not_an_order() -> None:
    ids = pa.array(range(1000))
    names = pa.array([f"n{i}" for i in range(1000)])

    def checksum(a: pa.Array, b: pa.Array) -> tuple[int, int]:
        return lanes(hash_rows([hash_array(a), hash_array(b)], len(a)))

    truth = checksum(ids, names)
    order = np.random.default_rng(7).permutation(1000)
    assert checksum(ids.take(order), names.take(order)) == truth
    swapped = names.to_pylist()
    swapped[3], swapped[4] = swapped[4], swapped[3]  # two values trade rows: same values, other rows
    assert checksum(ids, pa.array(swapped)) != truth
    assert checksum(ids, pa.array([*names.to_pylist()[:-1], "n0"])) != truth  # a duplicate in place of a row
    dropped = lanes(hash_rows([hash_array(ids.slice(0, 999)), hash_array(names.slice(0, 999))], 999))
    assert dropped != truth  # a lost row


def test_strings_longer_than_a_slice_of_the_polynomial_hash_alike_in_any_cut() -> None:
    from splitsource.copyjob import _rowhash

    values = ["x" * 1000 + str(i) for i in range(200)]
    whole = hash_array(pa.array(values))
    old = _rowhash._SLICE_BYTES
    _rowhash._SLICE_BYTES = 4096  # forces the halving path
    try:
        assert (hash_array(pa.array(values)) == whole).all()
    finally:
        _rowhash._SLICE_BYTES = old
    assert len(set(whole.tolist())) == 200


def test_a_string_hashes_as_the_polynomial_of_its_bytes_in_plain_integers() -> None:
    """The vectorized string hash (powers of each byte's place in the whole buffer, then each value's sum times
    the inverse power of its start) equals the polynomial written out per value with Python's integers."""
    from splitsource.copyjob import _rowhash

    mask = (1 << 64) - 1

    def mix(x: int) -> int:
        x ^= x >> 30
        x = x * 0xBF58476D1CE4E5B9 & mask
        x ^= x >> 27
        x = x * 0x94D049BB133111EB & mask
        return x ^ x >> 31

    def plain(value: bytes) -> int:
        polynomial = sum((b + 1) * pow(_rowhash._BASE, k, 1 << 64) for k, b in enumerate(value)) & mask
        return mix(polynomial ^ mix(len(value) + _rowhash._STRING & mask))

    rng = np.random.default_rng(7)
    values = [bytes(rng.integers(0, 256, int(n), dtype=np.uint8)) for n in rng.integers(0, 90, 400)]
    values += [b"", b"\xff" * 300, b""]
    array = pa.array(values, pa.binary())
    for arr in (array, array.slice(3, 200), pa.array(values, pa.large_binary())):
        want = [plain(v) for v in arr.to_pylist()]
        assert hash_array(arr).tolist() == want
