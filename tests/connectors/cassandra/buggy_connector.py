"""A Cassandra connector with a planted conversion bug, for the test that verify is not fooled by it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectors.cassandra import CassandraSource
from splitsource import RecordEmitter, SplitState


class UdtFieldDroppingSource(CassandraSource):
    """Reads like ``cassandra`` but its emitter nulls field ``class`` of UDT column ``ud`` (as the driver's
    attribute lookup once did for quoted field names)."""

    name = "cassandra"

    def create_record_emitter(self) -> RecordEmitter[Any, Any]:
        inner = super().create_record_emitter()

        class Dropping(RecordEmitter[Any, Any]):
            def emit(self, raw: Any, state: SplitState[Any]) -> pa.RecordBatch | None:
                batch = inner.emit(raw, state)
                if batch is None or "ud" not in batch.schema.names:
                    return batch
                i = batch.schema.get_field_index("ud")
                column = batch.column(i)
                children = [pa.nulls(len(column), f.type) if f.name == "class" else column.field(j)
                            for j, f in enumerate(column.type)]
                dropped = pa.StructArray.from_arrays(children, fields=list(column.type), mask=column.is_null())
                return batch.set_column(i, batch.schema.field(i), dropped)

        return Dropping()
