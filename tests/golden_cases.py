"""The objects frozen in tests/golden: one per persisted serializer, at its current version."""

from __future__ import annotations

from typing import Any

from connectors.cassandra._splits import CASSANDRA_SPLIT_SERIALIZER, CassandraSplit
from connectors.generator import GeneratorPosition, GeneratorSource, GeneratorSplit
from connectors.postgres._splits import POSITIONS, SPLITS, PostgresPosition, PostgresSplit
from serializers import SimpleVersionedSerializer
from splitsource import EnumeratorState, EnumeratorStateSerializer

_gen = GeneratorSource({})
# a composite key range resumed after a key, and a block range to the end of its relation
_PG_KEYS = PostgresSplit(2, '"public"."events"', ("7", "b c"), False, ("9", "a"), size=1 << 20, row_bytes=88)
_PG_BLOCKS = PostgresSplit(5, '"public"."events_2026"', first_block=128, end_block=-1, size=1 << 23, done=True)

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
    "postgres-split": (SPLITS, _PG_KEYS),
    "postgres-position": (POSITIONS, PostgresPosition((_PG_KEYS, _PG_BLOCKS), 1, '"public"."events":16384:10:2:0')),
}
