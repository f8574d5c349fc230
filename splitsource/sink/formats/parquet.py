"""Parquet part files: a bulk format (a file is readable only once its footer is written, so it rolls at every
commit); row groups gathered from Spark's small Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from splitsource._errors import SinkError
from splitsource._fs import Store
from splitsource.sink._text import plain_storage
from splitsource.sink.formats._base import FileFormat, PartFileWriter, combine_batches

__all__ = ["ParquetFormat"]


class _ParquetWriter(PartFileWriter):
    """Buffers Spark's small Arrow batches (10,000 rows by default) into row groups of up to ``ROW_GROUP_ROWS``
    rows or ``ROW_GROUP_BYTES`` bytes: one row group per incoming batch made files slower to write and to read."""

    ROW_GROUP_ROWS = 1 << 20
    ROW_GROUP_BYTES = 64 << 20
    COMPACT_AFTER = 64  # small batches buffered before they are copied into one

    def __init__(self, stream: Any, schema: pa.Schema, compression: str) -> None:
        super().__init__(stream)
        self._writer = pq.ParquetWriter(stream, schema, compression=compression)
        self._schema = schema
        self._buffer: list[pa.RecordBatch] = []
        self._small = 0  # batches at the end of the buffer not compacted yet
        self._rows = 0
        self._bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= self.ROW_GROUP_ROWS or self._bytes >= self.ROW_GROUP_BYTES:
            self._write_row_group()
        elif 0 < batch.num_rows < 1024:
            self._small += 1
            if self._small >= self.COMPACT_AFTER:
                self._compact()

    def _compact(self) -> None:
        """Copy the small batches at the end of the buffer into one: a bucket's few rows of each of many batches
        were slices that kept each whole batch in memory (and a Python object each), beyond what ``buffered``
        counts."""
        tail = self._buffer[-self._small:]
        del self._buffer[-self._small:]
        self._buffer.append(combine_batches(tail, self._schema))
        self._small = 0

    def _write_row_group(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_batches(self._buffer, self._schema), row_group_size=self._rows)
        self._buffer, self._small, self._rows, self._bytes = [], 0, 0, 0

    @property
    def length(self) -> int:
        # buffered rows count at their in-memory size, so rolling by size sees them before they reach the file
        return int(self._stream.tell()) + self._bytes

    @property
    def buffered(self) -> int:
        return self._bytes

    def spill(self) -> None:
        self._write_row_group()

    def flush(self) -> int:
        raise SinkError("a Parquet part file is only valid once closed (bulk format): roll it instead")

    def close(self) -> int:
        self._write_row_group()
        self._writer.close()  # writes the footer into the stream
        length = int(self._stream.tell())
        self._stream.close()
        return length


class ParquetFormat(FileFormat):
    name = "parquet"
    suffix = ".parquet"
    bulk = True

    def open(self, stream: Any, schema: pa.Schema, *, compression: str, header: bool, fresh: bool
             ) -> PartFileWriter:
        return _ParquetWriter(stream, schema, compression)

    def batches(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[dict[str, pa.Array]]:
        names = [f.name for f in fields]
        with fs.open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(65_536, columns=names):
                yield {n: batch.column(n) for n in names}

    def rows(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[list[Any]]:
        names = [f.name for f in fields]
        with fs.open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(65_536, columns=names):
                columns = [batch.column(n).cast(plain_storage(batch.column(n).type)).to_pylist() for n in names]
                yield from (list(row) for row in zip(*columns, strict=True))
