"""The objects frozen in tests/golden: one per persisted serializer, at its current version; and the files in
tests/golden/refused, of layouts a change left behind, which each connector's serializers now refuse in one line."""

from __future__ import annotations

from typing import Any

from connectors.cassandra._splits import CASSANDRA_SPLIT_SERIALIZER, CassandraSplit
from connectors.generator import GeneratorSource
from connectors.postgres import PostgresSource
from serializers import SimpleVersionedSerializer
from splitsource import CursorRange, EnumeratorState, EnumeratorStateSerializer, KeyRange, KeyRangePosition

_gen = GeneratorSource({})
_pg = PostgresSource({"table": "events"})  # the short path's serializers, as PostgreSQL uses them

CASES: dict[str, tuple[SimpleVersionedSerializer[Any], Any]] = {
    # page_size 0: what version 1 (before page sizes were kept) reads as; versions 1 and 2 held a row count (300),
    # which version 3 drops
    "cassandra-split": (CASSANDRA_SPLIT_SERIALIZER,
                        CassandraSplit(-(2**63), 2**63 - 1, 1024, b"paging", False, 0)),
    "generator-split": (_gen.split_serializer(), KeyRange(3, 3499, 3999, 15_000)),
    "generator-position": (_gen.position_serializer(), KeyRangePosition(17, 16_999, False, 99_999, True)),
    "generator-enumerator-state": (
        EnumeratorStateSerializer(_gen.split_serializer(), _gen.position_serializer()),
        EnumeratorState(pending=(KeyRange(1, 1199, 1999, 4000), KeyRange(2, 1999, 2999, 5000)),
                        position=KeyRangePosition(5, 4999, False, 9999, True)),
    ),
    # a composite key's texts (PostgreSQL's), resumed after a key; a plan after a block key (version 2: before
    # plans kept a guard)
    "keyrange-split": (_pg.split_serializer(), KeyRange(2, ("7", "b c"), ("9", "a"), 1 << 20)),
    "keyrange-position": (_pg.position_serializer(), KeyRangePosition(5, (1, 127, 65535), False, None, False)),
    # a range of a run by a cursor (SQLite's option cursor), and its plan (version 2 and 4: before, no cursor)
    "keyrange-cursor-split": (_pg.split_serializer(),
                              KeyRange(4, 300, 600, 8192, CursorRange("2026-12-02 10:00", "2026-12-02 11:00", True))),
    "keyrange-cursor-position": (_pg.position_serializer(), KeyRangePosition(2, 600, False, None, False, "",
                                                                             CursorRange(7, 9), "3f1c0de27a4b5e6d")),
}

# file in tests/golden/refused -> the serializer that refuses it now
REFUSED: dict[str, SimpleVersionedSerializer[Any]] = {
    "postgres-split-v1.bin": _pg.split_serializer(),
    "postgres-position-v1.bin": _pg.position_serializer(),
    "generator-split-v1.bin": _gen.split_serializer(),
    "generator-position-v1.bin": _gen.position_serializer(),
    "generator-enumerator-state-v1.bin": EnumeratorStateSerializer(_gen.split_serializer(), _gen.position_serializer()),
}
