"""Parquet part files: a bulk format (a file is readable only once its footer is written, so it rolls at every
commit); row groups gathered from Spark's small Arrow batches, and dictionary encoding only where it pays."""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
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
        self._writer: pq.ParquetWriter | None = None  # opened at the first row group, which picks its dictionaries
        self._compression = compression
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
            table = pa.Table.from_batches(self._buffer, self._schema)
            self._open(table).write_table(table, row_group_size=self._rows)
        self._buffer, self._small, self._rows, self._bytes = [], 0, 0, 0

    def _open(self, first: pa.Table | None) -> pq.ParquetWriter:
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._stream, self._schema, compression=self._compression,
                                            use_dictionary=dictionary_columns(first))
        return self._writer

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
        self._open(None).close()  # writes the footer into the stream
        length = int(self._stream.tell())
        self._stream.close()
        return length


# the rows a file's dictionaries are chosen on: about a first page of values, as parquet-mr decides on its first page
DECIDE_ON_ROWS = 20_000


def dictionary_columns(first: pa.Table | None) -> bool | list[str]:
    """The columns (Parquet leaf paths) to dictionary-encode in a file whose first row group is ``first``.

    pyarrow encodes every column with a dictionary until the dictionary passes 1 MiB, so a column of distinct values
    is hashed value by value and, in a row group of 100,000 such rows, written as a dictionary of them all plus an
    index per row: more CPU and a larger file than the values written plainly. parquet-mr, Spark's writer, falls
    back to plain values when its first page's dictionary and indices are no smaller than the values. Here the same
    test decides each top-level column of simple type on the first ``DECIDE_ON_ROWS`` rows of the file (a count of
    their distinct values); nested columns keep their dictionaries, and a file whose first row group is smaller is
    encoded as pyarrow does. Measured in docs/sink.md."""
    if first is None or first.num_rows < DECIDE_ON_ROWS:
        return True
    sample = first.slice(0, DECIDE_ON_ROWS)
    paths = _leaf_paths(sample.schema)
    if paths is None:
        return True
    chosen = []
    for field, leaves, column in zip(sample.schema, paths, sample.columns, strict=True):
        # a first row group of one batch is one chunk, used as it is: combining copies it (8 ms a string column)
        values = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        if not _simple(field.type) or _dictionary_pays(values, field.type):
            chosen += leaves
    return chosen


_VARIABLE = (pa.types.is_binary, pa.types.is_string, pa.types.is_large_binary, pa.types.is_large_string)
_FIXED = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_temporal,
          pa.types.is_fixed_size_binary)


def _simple(kind: pa.DataType) -> bool:
    """A type whose plain size the test knows; the rest (nested, dictionary, boolean, extension) is pyarrow's."""
    return any(test(kind) for test in _VARIABLE + _FIXED)


def _dictionary_pays(array: pa.Array, kind: pa.DataType) -> bool:
    """Whether the distinct values once, and an index per value, take fewer bytes than the values written plainly
    (a string's length takes 4). Counted without ``pyarrow.compute``, which a plain copy does not load (9 MB in
    each process, docs/benchmarks.md): strings as a set, fixed-width values by numpy on their bytes."""
    values = len(array) - array.null_count
    if values == 0:
        return True
    if any(test(kind) for test in _VARIABLE):
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if pa.types.is_large_binary(kind) or
                                pa.types.is_large_string(kind) else np.int32)
        plain = int(offsets[array.offset + len(array)] - offsets[array.offset]) + 4 * values
        distinct = len(set(array.to_pylist()) - {None})
    else:
        width = kind.bit_width // 8
        plain = values * width
        raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)
        raw = raw[array.offset * width:(array.offset + len(array)) * width]
        if width in (1, 2, 4, 8):
            # sorted, not np.unique, whose first call imports numpy.ma (16 ms); a null's slot counts at most once more
            ordered = np.sort(raw.view(f"u{width}"))
            distinct = 1 + int(np.count_nonzero(ordered[1:] != ordered[:-1]))
        else:
            data = raw.tobytes()
            distinct = len({data[i:i + width] for i in range(0, len(data), width)})
    index_bytes = values * max(1, math.ceil(math.log2(max(distinct, 2)))) / 8
    return bool(plain * distinct / values + index_bytes < plain)


@functools.lru_cache(maxsize=64)
def _leaf_paths(schema: pa.Schema) -> list[list[str]] | None:
    """Each top-level column's Parquet leaf paths (``tags.list.element``), as pyarrow names them (a column of no
    nested type: its name; else from an empty file's schema, 20 ms at a process's first); None where the leaves
    counted here are not the file's."""
    if not any(pa.types.is_nested(field.type) for field in schema):
        return [[field.name] for field in schema]
    sink = io.BytesIO()
    pq.write_table(schema.empty_table(), sink)
    parquet = pq.ParquetFile(io.BytesIO(sink.getvalue())).schema
    paths = [parquet.column(i).path for i in range(len(parquet))]
    out, at = [], 0
    for field in schema:
        count = _leaves(field.type)
        out.append(paths[at:at + count])
        at += count
    return out if at == len(paths) else None


def _leaves(kind: pa.DataType) -> int:
    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind) or \
            pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
        return _leaves(kind.value_type)
    return 1


class ParquetFormat(FileFormat):
    name = "parquet"
    suffix = ".parquet"
    bulk = True

    def open(self, stream: Any, schema: pa.Schema, *, compression: str, header: bool, fresh: bool
             ) -> PartFileWriter:
        return _ParquetWriter(stream, schema, compression)

    def batches(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[dict[str, pa.Array]]:
        """The file's columns as they are, but for strings and bytes kept as views or large (what delta-rs's merge
        writes), read as the plain types the sink writes: the same values."""
        names = [f.name for f in fields]
        with fs.open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(65_536, columns=names):
                yield {n: _unviewed(batch.column(n)) for n in names}

    def rows(self, fs: Store, path: str, fields: list[pa.Field], header: bool) -> Iterator[list[Any]]:
        names = [f.name for f in fields]
        with fs.open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(65_536, columns=names):
                columns = [batch.column(n).cast(plain_storage(batch.column(n).type)).to_pylist() for n in names]
                yield from (list(row) for row in zip(*columns, strict=True))


_VIEWED = {pa.string_view(): pa.string(), pa.large_string(): pa.string(), pa.binary_view(): pa.binary(),
           pa.large_binary(): pa.binary()}


def _unviewed(array: pa.Array) -> pa.Array:
    plain = _VIEWED.get(array.type)
    return array if plain is None else array.cast(plain)
