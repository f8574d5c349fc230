"""Part-file formats (Parquet, JSON lines, CSV): how each one writes into an open stream.

Parquet is a *bulk* format: a file is only readable once closed, so it rolls at every commit. JSON lines and CSV
are *row* formats: a prefix of the file is itself a valid file, which is what lets recovery truncate an in-progress
file back to its last committed length.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from splitsource._errors import SinkError
from splitsource.sink._text import json_fragments, text_column

__all__ = [
    "FORMATS",
    "FileFormat",
    "PartFileWriter",
    "encode_json_lines",
]


class PartFileWriter(ABC):
    """Writes batches into one open part file; ``length`` is what a reader would find after :meth:`flush`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @abstractmethod
    def write(self, batch: pa.RecordBatch) -> None: ...

    @property
    def length(self) -> int:
        return int(self._stream.tell())

    @property
    def buffered(self) -> int:
        """Bytes of rows held in memory, not yet encoded into the file (0 for the row formats)."""
        return 0

    def spill(self) -> None:
        """Encode what :attr:`buffered` holds into the file now (a Parquet row group); the file stays open. The
        row formats buffer nothing: nothing to do."""
        return None

    def flush(self) -> int:
        """Push buffered bytes to the file system; returns the length that is now valid."""
        self._stream.flush()
        return self.length

    def close(self) -> int:
        length = self.length
        self._stream.close()
        return length


def combine_batches(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    """One batch of ``batches``' rows, copied into buffers of its own (slices no longer keep their whole batches
    in memory); a single batch is returned as it is."""
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches, schema).combine_chunks().to_batches()[0]


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


def encode_json_lines(batch: pa.RecordBatch) -> bytes:
    """Rows as strict JSON objects, one per line ended by ``\\n`` (value text: ``splitsource.sink._text``)."""
    names = [json.dumps(name, ensure_ascii=False) + ":" for name in batch.schema.names]
    columns = [json_fragments(column) for column in batch.columns]
    rows = zip(*columns, strict=True)
    lines = ["{" + ",".join(n + v for n, v in zip(names, row, strict=True)) + "}\n" for row in rows]
    if not columns:
        lines = ["{}\n"] * batch.num_rows
    return "".join(lines).encode("utf-8")


class _JsonLinesWriter(PartFileWriter):
    def write(self, batch: pa.RecordBatch) -> None:
        self._stream.write(encode_json_lines(batch))


def _csv_native(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
                or pa.types.is_large_string(t) or pa.types.is_floating(t) or pa.types.is_null(t))


def csv_ready(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every column pyarrow's CSV writer would not print exactly replaced by its text; float
    columns holding NaN or an infinity become text too (``NaN``, ``Infinity``), in this batch only."""
    columns, fields, changed = [], [], False
    for field, column in zip(batch.schema, batch.columns, strict=True):
        text = text_column(column)
        if text is None and not _csv_native(field.type):
            text = column.cast(pa.string())
        if text is not None:
            column, field, changed = text, pa.field(field.name, pa.string(), field.nullable), True
        columns.append(column)
        fields.append(field)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields)) if changed else batch


class _CsvWriter(PartFileWriter):
    def __init__(self, stream: Any, schema: pa.Schema, header: bool) -> None:
        super().__init__(stream)
        # pyarrow's writer is made per batch: a float column becomes text only in batches holding NaN or an
        # infinity, so the schema varies; the header is written once, here
        self._options = pa_csv.WriteOptions(include_header=False)
        if header:
            stream.write(pa_csv_header(schema))

    def write(self, batch: pa.RecordBatch) -> None:
        pa_csv.write_csv(csv_ready(batch), self._stream, write_options=self._options)


@dataclass(frozen=True)
class FileFormat:
    """A part-file format: its default suffix, whether it is bulk, and how to open a writer."""

    name: str
    suffix: str
    bulk: bool

    def check(self, schema: pa.Schema) -> None:
        """Refuse, before anything is written, a schema this format cannot hold: every format holds every Arrow
        type the connectors produce (CSV holds nested values as their JSON text)."""

    def open(self, stream: Any, schema: pa.Schema, *, compression: str, header: bool, fresh: bool) -> PartFileWriter:
        if self.name == "parquet":
            return _ParquetWriter(stream, schema, compression)
        if self.name == "jsonl":
            return _JsonLinesWriter(stream)
        return _CsvWriter(stream, schema, header and fresh)


FORMATS = {
    "parquet": FileFormat("parquet", ".parquet", bulk=True),
    "jsonl": FileFormat("jsonl", ".jsonl", bulk=False),
    "csv": FileFormat("csv", ".csv", bulk=False),
}


def pa_csv_header(schema: pa.Schema) -> bytes:
    """The header line pyarrow writes for ``schema`` (RFC 4180 quoting)."""
    buffer = pa.BufferOutputStream()
    empty = pa.Table.from_arrays([pa.array([], pa.string()) for _ in schema.names], names=schema.names)
    pa_csv.write_csv(empty, buffer)
    return bytes(buffer.getvalue())
