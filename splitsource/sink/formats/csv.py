"""CSV part files: a row format (RFC 4180: pyarrow's writer, with every value it would not print exactly given as
its text first); read back field by field, an unquoted empty field as null and ``""`` as the empty string, each
field parsed by its column's type."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from splitsource._fs import Store
from splitsource.sink._text import text_column
from splitsource.sink.formats._base import FileFormat, PartFileWriter
from splitsource.sink.formats._values import from_text

__all__ = ["CsvFormat", "csv_ready", "csv_records", "pa_csv_header"]


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


class CsvFormat(FileFormat):
    name = "csv"
    suffix = ".csv"
    bulk = False

    def open(self, stream: Any, schema: pa.Schema, *, compression: str, header: bool, fresh: bool
             ) -> PartFileWriter:
        return _CsvWriter(stream, schema, header and fresh)

    def rows(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[list[Any]]:
        names = [f.name for f in fields]
        records = csv_records(fs.read_bytes(path).decode("utf-8"))
        order = list(range(len(fields)))
        if header:
            first = next(records, None)
            if first is not None:
                order = [first.index(n) if n in first else -1 for n in names]
        for record in records:
            yield [None if i < 0 else from_text(record[i], f.type) for i, f in zip(order, fields, strict=True)]


_FIELD = re.compile(r'"((?:[^"]|"")*)"|([^,"\r\n]*)')


def csv_records(text: str) -> Iterator[list[str | None]]:
    """RFC 4180 records: a quoted field is text (``""`` the empty string), an unquoted empty field None."""
    pos, end = 0, len(text)
    while pos < end:
        record: list[str | None] = []
        while True:
            m = _FIELD.match(text, pos)
            assert m is not None  # the pattern matches the empty string
            quoted, bare = m.groups()
            record.append(quoted.replace('""', '"') if quoted is not None else (bare or None))
            pos = m.end()
            if pos < end and text[pos] == ",":
                pos += 1
                continue
            if text.startswith("\r\n", pos):
                pos += 2
            elif pos < end and text[pos] == "\n":
                pos += 1
            elif pos < end:
                raise ValueError(f"malformed CSV at character {pos}")
            break
        yield record


def pa_csv_header(schema: pa.Schema) -> bytes:
    """The header line pyarrow writes for ``schema`` (RFC 4180 quoting)."""
    buffer = pa.BufferOutputStream()
    empty = pa.Table.from_arrays([pa.array([], pa.string()) for _ in schema.names], names=schema.names)
    pa_csv.write_csv(empty, buffer)
    return bytes(buffer.getvalue())
