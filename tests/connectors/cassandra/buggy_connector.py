"""A Cassandra connector with a planted conversion bug, for the test that verify is not fooled by it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectors.cassandra import CassandraSource
from splitsource import RecordEmitter


class UdtFieldDroppingSource(CassandraSource):
    """Reads like ``cassandra`` but its emitter nulls field ``class`` of UDT column ``ud`` (as the driver's
    attribute lookup once did for quoted field names)."""

    name = "cassandra"

    def create_record_emitter(self) -> RecordEmitter[Any, Any]:
        from tests.splitsource.fakes import RewritingEmitter

        def drop_class(column: pa.Array) -> pa.Array:
            children = [pa.nulls(len(column), f.type) if f.name == "class" else column.field(j)
                        for j, f in enumerate(column.type)]
            return pa.StructArray.from_arrays(children, fields=list(column.type), mask=column.is_null())

        return RewritingEmitter(super().create_record_emitter(), "ud", drop_class)
