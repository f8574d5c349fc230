"""The connectors' uuid text: a page of 16-byte uuids formatted at once, exactly Python's own text of each."""

from __future__ import annotations

import random
import uuid

import pyarrow as pa

from connectors._uuids import uuid_text


def _values() -> list[uuid.UUID | None]:
    rng = random.Random(3)
    values: list[uuid.UUID | None] = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(5_000)]
    values += [uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.uuid1(), None]
    values.insert(7, None)
    return values


def _raw(values: list[uuid.UUID | None]) -> pa.Array:
    return pa.array([None if v is None else v.bytes for v in values], pa.binary(16))


def test_a_page_of_uuids_reads_as_pythons_canonical_text_with_its_nulls() -> None:
    values = _values()
    text = uuid_text(_raw(values))
    assert text.to_pylist() == [None if v is None else str(v) for v in values]
    assert text.null_count == 2 and text.type == pa.string()
    assert uuid_text(_raw([])).to_pylist() == []
    assert uuid_text(_raw([None])).to_pylist() == [None]


def test_a_slice_keeps_its_own_rows_and_nulls() -> None:
    values = _values()
    for start, length in ((1, 6), (7, 1), (4_990, 15), (0, 0)):
        text = uuid_text(_raw(values).slice(start, length))
        assert text.to_pylist() == [None if v is None else str(v) for v in values[start:start + length]]


def test_an_extension_type_on_the_bytes_reads_as_its_storage() -> None:
    # as the ADBC driver gives a PostgreSQL uuid: its own extension type on fixed_size_binary(16)
    values = _values()[:20]
    wrapped = pa.ExtensionArray.from_storage(pa.uuid(), _raw(values))
    assert uuid_text(wrapped).to_pylist() == [None if v is None else str(v) for v in values]
