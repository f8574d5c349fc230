"""How ``verify`` reads a copy's output files back: as a reader of each format would, apart from the sink's writers.

Parquet through pyarrow; JSON lines as strict JSON split on ``\\n`` only; CSV by RFC 4180 (an unquoted empty field
is null, ``""`` is the empty string), each field parsed by its column's type (ISO 8601 dates and timestamps with
expanded years, ``NaN``/``Infinity``, base64 binary, nested values as JSON). Values come out in their column's plain
form (:func:`splitsource.sink._text.plain_storage`), the form ``Source.reference_rows`` gives.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from splitsource._errors import SinkError
from splitsource._fs import Store
from splitsource.sink._text import (
    is_duration,
    parse_iso_date,
    parse_iso_duration,
    parse_iso_timestamp,
    plain_storage,
)

__all__ = ["csv_records", "file_batches", "file_rows", "from_json", "from_text"]


_STRING_RENDERED = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary,
                    pa.types.is_timestamp, pa.types.is_date, pa.types.is_decimal, is_duration)
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def from_json(value: Any, t: pa.DataType) -> Any:
    """A value as JSON lines (and CSV's nested fields) hold it, back to the plain value of type ``t``."""
    if value is None:
        return None
    if pa.types.is_floating(t):
        return _NON_FINITE[value] if isinstance(value, str) else float(value)
    if pa.types.is_timestamp(t):
        return parse_iso_timestamp(value, t.unit)
    if pa.types.is_date32(t):
        return parse_iso_date(value)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return base64.b64decode(value, validate=True)
    if is_duration(t):
        return parse_iso_duration(value)
    if pa.types.is_map(t):
        def key(text: str) -> Any:
            if any(check(t.key_type) for check in _STRING_RENDERED):
                return from_json(text, t.key_type)
            try:
                return from_json(json.loads(text), t.key_type)
            except ValueError:
                return from_json(text, t.key_type)

        return [(key(k), from_json(v, t.item_type)) for k, v in value.items()]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [from_json(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: from_json(value.get(f.name), f.type) for f in t}
    return value


def from_text(text: str | None, t: pa.DataType) -> Any:
    """One CSV field back to the plain value of type ``t`` (None: an unquoted empty field, null)."""
    if text is None:
        return None
    if pa.types.is_integer(t):
        return int(text)
    if pa.types.is_floating(t):
        return float(text)
    if pa.types.is_boolean(t):
        return {"true": True, "false": False}[text]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return text
    if pa.types.is_nested(t) and not is_duration(t):
        return from_json(json.loads(text), t)
    return from_json(text, t)


def _strict(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (strict JSON has no NaN or infinity)")


def _jsonl_rows(data: bytes, names: list[str], path: str) -> Iterator[list[Any]]:
    # split on \n only: U+2028 and the other characters str.splitlines() breaks at are legal inside a JSON string
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line:
            continue
        try:
            obj = json.loads(line.decode("utf-8"), parse_constant=_strict)
        except ValueError as exc:
            raise SinkError(f"{path}: line {number} is not valid JSON: {exc}") from None
        yield [obj.get(n) for n in names]


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


_TEXT_CHUNK = 16_384  # rows of a text file turned into Arrow arrays at a time


def file_batches(fs: Store, path: str, fmt: str, fields: list[pa.Field], header: bool) -> Iterator[
        dict[str, pa.Array]]:
    """The columns ``fields`` of the file at ``path`` in batches, each a dict of name to array: Parquet as pyarrow
    reads it, text formats decoded value by value into arrays of the fields' plain types."""
    names = [f.name for f in fields]
    if fmt == "parquet":
        with fs.open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(65_536, columns=names):
                yield {n: batch.column(n) for n in names}
        return
    chunk: list[list[Any]] = []
    for row in file_rows(fs, path, fmt, fields, header):
        chunk.append(row)
        if len(chunk) == _TEXT_CHUNK:
            yield _arrays(chunk, fields)
            chunk = []
    if chunk:
        yield _arrays(chunk, fields)


def _arrays(rows: list[list[Any]], fields: list[pa.Field]) -> dict[str, pa.Array]:
    columns = list(zip(*rows, strict=True))
    return {f.name: pa.array(c, plain_storage(f.type)) for f, c in zip(fields, columns, strict=True)}


def file_rows(fs: Store, path: str, fmt: str, fields: list[pa.Field], header: bool) -> Iterator[list[Any]]:
    """The rows of the file at ``path``, each a list of plain values in the order of ``fields``."""
    names = [f.name for f in fields]
    if fmt == "parquet":
        with fs.open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(65_536, columns=names):
                columns = [batch.column(n).cast(plain_storage(batch.column(n).type)).to_pylist() for n in names]
                yield from (list(row) for row in zip(*columns, strict=True))
        return
    data = fs.read_bytes(path)
    if fmt == "jsonl":
        for row in _jsonl_rows(data, names, path):
            yield [from_json(v, f.type) for v, f in zip(row, fields, strict=True)]
        return
    records = csv_records(data.decode("utf-8"))
    order = list(range(len(fields)))
    if header:
        first = next(records, None)
        if first is not None:
            order = [first.index(n) if n in first else -1 for n in names]
    for record in records:
        yield [None if i < 0 else from_text(record[i], f.type) for i, f in zip(order, fields, strict=True)]
