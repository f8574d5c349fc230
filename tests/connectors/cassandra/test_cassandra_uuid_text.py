"""The read path formats a page of raw 16-byte uuids at once: exactly Python's own text of each uuid."""

from __future__ import annotations

import random
import uuid

from connectors.cassandra._types import uuid_text_array


def test_raw_uuids_read_as_pythons_canonical_text() -> None:
    rng = random.Random(3)
    values: list[uuid.UUID | None] = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(5_000)]
    values += [uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.uuid1(), None]
    values.insert(7, None)
    text = uuid_text_array([None if v is None else v.bytes for v in values])
    assert text.to_pylist() == [None if v is None else str(v) for v in values]
    assert text.null_count == 2 and text.type == "string"
    assert uuid_text_array([]).to_pylist() == []
    assert uuid_text_array([None]).to_pylist() == [None]
