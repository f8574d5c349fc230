"""Part-file formats (Parquet, JSON lines, CSV) and the file-system operations the sink needs, on pyarrow.fs.

Parquet is a *bulk* format: a file is only readable once closed, so it rolls at every commit. JSON lines and CSV
are *row* formats: a prefix of the file is itself a valid file, which is what lets recovery truncate an in-progress
file back to its last committed length.
"""

from __future__ import annotations

import base64
import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from splitsource._errors import OptionsError, SinkError

__all__ = [
    "FORMATS",
    "FileFormat",
    "PartFileWriter",
    "encode_json_lines",
    "read_text",
    "resolve_filesystem",
    "truncate",
    "write_atomically",
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

    def flush(self) -> int:
        """Push buffered bytes to the file system; returns the length that is now valid."""
        self._stream.flush()
        return self.length

    def close(self) -> int:
        length = self.length
        self._stream.close()
        return length


class _ParquetWriter(PartFileWriter):
    """Buffers Spark's small Arrow batches (10,000 rows by default) into row groups of up to ``ROW_GROUP_ROWS``
    rows or ``ROW_GROUP_BYTES`` bytes: one row group per incoming batch made files slower to write and to read."""

    ROW_GROUP_ROWS = 1 << 20
    ROW_GROUP_BYTES = 64 << 20

    def __init__(self, stream: Any, schema: pa.Schema, compression: str) -> None:
        super().__init__(stream)
        self._writer = pq.ParquetWriter(stream, schema, compression=compression)
        self._buffer: list[pa.RecordBatch] = []
        self._rows = 0
        self._bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= self.ROW_GROUP_ROWS or self._bytes >= self.ROW_GROUP_BYTES:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_batches(self._buffer), row_group_size=self._rows)
        self._buffer, self._rows, self._bytes = [], 0, 0

    @property
    def length(self) -> int:
        # buffered rows count at their in-memory size, so rolling by size sees them before they reach the file
        return int(self._stream.tell()) + self._bytes

    def flush(self) -> int:
        raise SinkError("a Parquet part file is only valid once closed (bulk format): roll it instead")

    def close(self) -> int:
        self._write_row_group()
        self._writer.close()  # writes the footer into the stream
        length = int(self._stream.tell())
        self._stream.close()
        return length


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "total_seconds"):  # timedelta (durations)
        return value.total_seconds()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def encode_json_lines(batch: pa.RecordBatch) -> bytes:
    """Rows as JSON objects, one per line (timestamps ISO 8601, binary base64, decimals as strings)."""
    dumps = json.JSONEncoder(default=_json_default, ensure_ascii=False, separators=(",", ":")).encode
    return "".join(dumps(row) + "\n" for row in batch.to_pylist()).encode("utf-8")


class _JsonLinesWriter(PartFileWriter):
    def write(self, batch: pa.RecordBatch) -> None:
        self._stream.write(encode_json_lines(batch))


def _is_binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def _is_zoned(t: pa.DataType) -> bool:
    """A timestamp in zone "UTC" (what Spark hands over), which pyarrow prints as its instant and ``Z``. Other
    zones, "Etc/UTC" and "+00:00" included, print local time and an offset and are left to pyarrow."""
    return bool(pa.types.is_timestamp(t) and t.tz == "UTC")


def csv_schema(schema: pa.Schema) -> pa.Schema:
    """The schema CSV part files are written in: binary columns become base64 text (as in JSON lines, and as
    DataStax Bulk Loader writes blobs), since CSV holds only text; UTC timestamps become their text."""
    return pa.schema([pa.field(f.name, pa.string(), f.nullable) if _is_binary(f.type) or _is_zoned(f.type) else f
                      for f in schema])


def _zoned_text(column: pa.Array) -> pa.Array:
    """What pyarrow's CSV writer prints for a UTC timestamp (the instant, then ``Z``), 15x faster: it converts
    every value through the zone database to print it."""
    naive = column.cast(pa.timestamp(column.type.unit))  # same stored UTC values, no zone
    return pc.binary_join_element_wise(naive.cast(pa.string()), pa.scalar("Z"), "")


def csv_ready(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in :func:`csv_schema`: each binary value base64-encoded, UTC timestamps as text, nulls kept."""
    if not any(_is_binary(f.type) or _is_zoned(f.type) for f in batch.schema):
        return batch
    columns = []
    for column in batch.columns:
        if _is_binary(column.type):
            column = pa.array([None if v is None else base64.b64encode(v).decode("ascii")
                               for v in column.to_pylist()], pa.string())
        elif _is_zoned(column.type):
            column = _zoned_text(column)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=csv_schema(batch.schema))


class _CsvWriter(PartFileWriter):
    def __init__(self, stream: Any, schema: pa.Schema, header: bool) -> None:
        super().__init__(stream)
        self._writer = pa_csv.CSVWriter(stream, csv_schema(schema),
                                        write_options=pa_csv.WriteOptions(include_header=header))

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(csv_ready(batch))

    def close(self) -> int:
        self._writer.close()
        return super().close()


@dataclass(frozen=True)
class FileFormat:
    """A part-file format: its default suffix, whether it is bulk, and how to open a writer."""

    name: str
    suffix: str
    bulk: bool

    def check(self, schema: pa.Schema) -> None:
        """Refuse, before anything is written, a schema this format cannot hold (naming the column)."""
        if self.name != "csv":
            return
        for field in schema:
            if pa.types.is_nested(field.type):
                raise OptionsError(f"option 'format': csv cannot hold column '{field.name}' of type {field.type}; "
                                   "use format parquet or jsonl")

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


def resolve_filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The file system and the path inside it: URIs (``s3://``, ``hdfs://``, ``file://``) go to pyarrow as they
    are; anything else is a local path, made absolute."""
    if "://" in path:
        try:
            fs, inner = pafs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise OptionsError(f"option 'path': cannot open {path!r}: {exc}") from None
        return fs, inner.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(path)


def truncate(fs: pafs.FileSystem, path: str, length: int) -> bool:
    """Cut ``path`` to ``length`` bytes where the file system can; False where it cannot (the caller then writes
    a valid-length file, as Flink's BucketingSink does)."""
    if isinstance(fs, pafs.LocalFileSystem):
        os.truncate(path, length)
        return True
    return False


def read_text(fs: pafs.FileSystem, path: str) -> str:
    with fs.open_input_stream(path) as stream:
        return bytes(stream.read()).decode("utf-8")


def write_atomically(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path`` and move it into place."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with fs.open_output_stream(tmp) as stream:
        stream.write(data)
    fs.move(tmp, path)

