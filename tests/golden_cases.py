"""The objects frozen in tests/golden: one per persisted serializer, at its current version."""

from __future__ import annotations

from typing import Any

from connectors.cassandra._splits import CASSANDRA_SPLIT_SERIALIZER, CassandraSplit
from connectors.generator import GeneratorPosition, GeneratorSource, GeneratorSplit
from connectors.postgres import PostgresSource
from serializers import SimpleVersionedSerializer
from splitsource import EnumeratorState, EnumeratorStateSerializer, KeyRange, KeyRangePosition

_gen = GeneratorSource({})
_pg = PostgresSource({"table": "events"})  # the short path's serializers, as PostgreSQL uses them

CASES: dict[str, tuple[SimpleVersionedSerializer[Any], Any]] = {
    # page_size 0: what version 1 (before page sizes were kept) reads as; versions 1 and 2 held a row count (300),
    # which version 3 drops
    "cassandra-split": (CASSANDRA_SPLIT_SERIALIZER,
                        CassandraSplit(-(2**63), 2**63 - 1, 1024, b"paging", False, 0)),
    "generator-split": (_gen.split_serializer(), GeneratorSplit(3, 3500, 4000, 30)),
    "generator-position": (_gen.position_serializer(), GeneratorPosition(17)),
    "generator-enumerator-state": (
        EnumeratorStateSerializer(_gen.split_serializer(), _gen.position_serializer()),
        EnumeratorState(pending=(GeneratorSplit(1, 1200, 2000, 30), GeneratorSplit(2, 2000, 3000, 30)),
                        position=GeneratorPosition(5)),
    ),
    # a composite key's texts (PostgreSQL's), resumed after a key; a plan after a block key (version 2: before
    # plans kept a guard)
    "keyrange-split": (_pg.split_serializer(), KeyRange(2, ("7", "b c"), ("9", "a"), 1 << 20)),
    "keyrange-position": (_pg.position_serializer(), KeyRangePosition(5, (1, 127, 65535), False, None, False)),
}
