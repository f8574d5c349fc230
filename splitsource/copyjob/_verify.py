"""``splitsource verify``: does the committed output hold exactly the source's rows, value for value?

Both sides are reduced to a row count and an order-independent checksum: the sum, modulo 2**128, of a 128-bit
BLAKE2b digest of each row's canonical form. The two sides are computed independently of the copy:

- the **source** side from :meth:`Source.reference_rows`: the connector's own client values (the Cassandra
  driver's, the generator's formula in plain Python), never the record emitter that the copy used;
- the **output** side by decoding the files as a reader would: Parquet through pyarrow, JSON lines as strict
  JSON split on ``\\n`` only, CSV by RFC 4180 (an unquoted empty field is null, ``""`` is the empty string),
  each field parsed by its column's type (ISO 8601 dates and timestamps with expanded years, ``NaN``/``Infinity``,
  base64 binary, nested values as JSON); bucket-column values decoded from the directory names.

A lost row, a duplicated row, a changed or dropped value changes the checksum. A connector without
``reference_rows`` is read through its emitter instead; the result then says that it is not independent.

On a mismatch, the copy's split ledger (:mod:`splitsource.copyjob._ledger`) says how many rows each split put into
the output; each of those splits is counted in the source again, and the splits whose counts differ are named.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from serializers import read_envelope
from splitsource._api import FixedEnumeratorContext, Source
from splitsource._errors import SinkError
from splitsource._fs import Store, is_uri, redact, resolve_filesystem, sibling_uri
from splitsource.copyjob._ledger import read_ledger
from splitsource.copyjob._ownership import read_owner
from splitsource.copyjob._protocol import copy_writer_id
from splitsource.runtime._source_reader import ReaderMetrics, SourceReader
from splitsource.sink._bucketers import NULL_SEGMENT
from splitsource.sink._committer import SUCCESS_FILE, BucketingGlobalCommitter, metadata_location
from splitsource.sink._files import PartNames, join, writer_of
from splitsource.sink._text import (
    is_duration,
    parse_iso_date,
    parse_iso_duration,
    parse_iso_timestamp,
    plain_storage,
)

__all__ = ["Digest", "SplitCheck", "SplitDifference", "VerifyResult", "canonical", "check_splits", "digest_output",
           "digest_source", "verify"]

_MOD = 1 << 128


@dataclass
class Digest:
    """Row count and order-independent checksum of a multiset of rows."""

    rows: int = 0
    checksum: int = 0

    def add(self, row: bytes) -> None:
        self.rows += 1
        self.checksum = (self.checksum + int.from_bytes(hashlib.blake2b(row, digest_size=16).digest(), "big")) % _MOD

    @property
    def hex(self) -> str:
        return f"{self.checksum:032x}"


@dataclass(frozen=True)
class SplitDifference:
    """A split whose rows in the source now differ from the rows the copy committed of it."""

    split_id: str
    copied: int
    source: int


@dataclass(frozen=True)
class SplitCheck:
    """On a mismatch: the copy's split ledger (:mod:`splitsource.copyjob._ledger`) against the source, split by
    split. ``note`` says why there is no check (no ledger); else ``splits`` splits were compared, the copy committed
    ``copied`` rows of them, and ``differ`` are those whose count differs."""

    splits: int = 0
    copied: int = 0
    differ: tuple[SplitDifference, ...] = ()
    note: str = ""


_NAMED = 20  # splits named in the text; the JSON-able result has them all


@dataclass(frozen=True)
class VerifyResult:
    source: Digest
    output: Digest
    independent: bool = True
    splits: SplitCheck | None = None  # on a mismatch only
    foreign: tuple[str, ...] = ()  # data files in the output that no commit of the copy made

    @property
    def match(self) -> bool:
        return (self.source.rows == self.output.rows and self.source.checksum == self.output.checksum
                and not self.foreign)

    def text(self) -> str:
        verdict = "MATCH" if self.match else "MISMATCH"
        lines = [f"{verdict}: source {self.source.rows:,} rows (checksum {self.source.hex}), output "
                 f"{self.output.rows:,} rows (checksum {self.output.hex})"]
        if self.foreign:
            shown = ", ".join(self.foreign[:_NAMED])
            more = f" and {len(self.foreign) - _NAMED:,} more" if len(self.foreign) > _NAMED else ""
            lines.append(f"{len(self.foreign):,} data file(s) in the output were not written by this copy, and "
                         f"every reader of the directory reads them too: {shown}{more}")
        if not self.match and self.source.rows != self.output.rows:
            lines.append(f"the output has {self.output.rows - self.source.rows:+,} rows against the source")
        elif not self.match:
            lines.append("same row count, different rows: values differ, or rows are duplicated and others missing")
        if self.splits is not None:
            lines.extend(self._split_lines(self.splits))
        if not self.independent:
            lines.append("note: this connector has no reference_rows(), so the source side was read through the "
                         "same emitter as the copy; a conversion error would not show")
        return "\n".join(lines)

    def _split_lines(self, check: SplitCheck) -> list[str]:
        if check.note:
            return [f"no per-split counts: {check.note}"]
        if not check.differ:
            lines = [f"every split of the copy ({check.splits:,}) holds as many rows in the source as the copy "
                     "committed of it: values differ, not counts"]
            if check.copied != self.output.rows:
                lines = [f"the copy committed {check.copied:,} rows, the output holds {self.output.rows:,}: files "
                         "were added to or removed from the output after the copy"]
            return lines
        lines = [f"{len(check.differ):,} of {check.splits:,} splits differ (rows committed by the copy, rows in "
                 "the source now):"]
        for d in check.differ[:_NAMED]:
            lines.append(f"  split {d.split_id}: copied {d.copied:,}, source {d.source:,} ({d.source - d.copied:+,})")
        if len(check.differ) > _NAMED:
            lines.append(f"  and {len(check.differ) - _NAMED:,} more")
        return lines


# -- canonical form: one representation per value, whichever side it came from -------------------------------


def canonical(value: Any, t: pa.DataType) -> Any:
    """A plain value (see ``Source.reference_rows``) of Arrow type ``t`` in the form both sides are hashed in."""
    if value is None:
        return None
    if pa.types.is_floating(t):
        number = float(value)
        if pa.types.is_float32(t) or pa.types.is_float16(t):
            number = struct.unpack("<f", struct.pack("<f", number))[0]
        return "NaN" if math.isnan(number) else number.hex()  # hex keeps -0.0 apart from 0.0
    if pa.types.is_map(t):
        return [[canonical(k, t.key_type), canonical(v, t.item_type)] for k, v in value]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [canonical(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return [canonical(value.get(f.name), f.type) for f in t]
    if pa.types.is_decimal(t):
        return str(value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _row_bytes(values: Iterable[Any], suffix: bytes) -> bytes:
    return repr(tuple(values)).encode("utf-8") + suffix


def _bucket_suffix(values: list[str | None]) -> bytes:
    return b"" if not values else b"\x00" + json.dumps(values).encode()


# -- the source side ---------------------------------------------------------------------------------------------


def _plain_rows_through_emitter(source: Source[Any, Any, Any, Any]) -> Iterator[tuple[Any, ...]]:
    enumerator = source.create_enumerator(FixedEnumeratorContext(1))
    enumerator.start()
    reader = SourceReader(source, enumerator.next_split, name="verify")
    try:
        for batch in reader.read():
            columns = [c.cast(plain_storage(c.type)).to_pylist() for c in batch.columns]
            yield from zip(*columns, strict=True)
    finally:
        reader.close()
        enumerator.close()


def _bucket_text(t: pa.DataType) -> Callable[[Any], str | None]:
    """How the sink names a bucket value of type ``t`` (Arrow's cast to string); ``''`` reads back as null."""
    import pyarrow.compute as pc
    cache: dict[Any, str | None] = {}

    def text(value: Any) -> str | None:
        if value is None:
            return None
        key = repr(value)
        if key not in cache:
            cast = pc.cast(pa.array([value], plain_storage(t)).cast(t), pa.string())[0].as_py()
            cache[key] = cast or None
        return cache[key]

    return text


def digest_source(source: Source[Any, Any, Any, Any], layout: dict[str, Any]) -> tuple[Digest, bool]:
    """Digest every row of the source; True when it came from ``reference_rows`` (independent of the copy)."""
    schema = source.schema()
    bucket_columns = _bucket_columns(layout)
    keys = [(schema.get_field_index(c), _bucket_text(schema.field(c).type)) for c in bucket_columns]
    volatile = set(source.volatile_columns())
    data = [(i, f.type, f.name in volatile) for i, f in enumerate(schema) if f.name not in bucket_columns]
    rows = source.reference_rows()
    independent = rows is not None
    digest = Digest()
    for row in rows if rows is not None else _plain_rows_through_emitter(source):
        suffix = _bucket_suffix([text(row[i]) for i, text in keys])
        digest.add(_row_bytes((_compared(row[i], t, v) for i, t, v in data), suffix))
    return digest, independent


def _compared(value: Any, t: pa.DataType, volatile: bool) -> Any:
    """What verify hashes of a value: its canonical form, or of a volatile column (a TTL) only whether it is
    null (``Source.volatile_columns``)."""
    return (value is not None) if volatile else canonical(value, t)


# -- the output side ---------------------------------------------------------------------------------------------


def _bucket_columns(layout: dict[str, Any]) -> list[str]:
    if layout.get("bucketer") != "columns":
        return []
    return [c.strip() for c in str(layout.get("bucket_columns", "")).split(",") if c.strip()]


def _path_values(relative_dir: str, columns: list[str]) -> list[str | None]:
    found: dict[str, str | None] = {}
    for segment in relative_dir.split("/"):
        name, eq, value = segment.partition("=")
        if eq:
            found[unquote(name)] = None if value == NULL_SEGMENT else unquote(value)
    return [found.get(c) for c in columns]


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


def _files(fs: Store, base: str) -> list[tuple[str, str]]:
    out = []
    for info in sorted(fs.list(base, recursive=True), key=lambda i: i.path):
        relative = info.path[len(base) + 1:]
        if not info.is_dir and not any(p.startswith(("_", ".")) for p in relative.split("/")):
            out.append((info.path, relative))
    return out


def foreign_files(output: str, layout: dict[str, Any], token: str | None, records: str = "") -> tuple[str, ...]:
    """The files under ``output`` (DuckDB and Polars read every one; Spark and pyarrow.dataset skip names that
    start with ``_`` or ``.``) that no commit of the copy with ownership ``token`` made: not named as its part
    files are (another writer's, put there by hand, or a transient file of a copy that has not finished)."""
    fs, base = resolve_filesystem(output)
    names = PartNames(str(layout.get("part_prefix", "part")), str(layout.get("part_suffix", "")))
    mine = copy_writer_id(token) if token else None
    out = []
    for info in sorted(fs.list(base, recursive=True), key=lambda i: i.path):
        relative = info.path[len(base) + 1:]
        if info.is_dir or relative == SUCCESS_FILE or (records and info.path.startswith(records + "/")):
            continue
        parsed = names.parse_finished(relative.rsplit("/", 1)[-1])
        # a task is <partition>-<token>, or <partition>-<writer>-<token> since writers carry an id
        if parsed is None or not _COPY_TASK.fullmatch(parsed[0]) or writer_of(parsed[0]) not in (None, mine):
            out.append(relative)
    return tuple(out)


_COPY_TASK = re.compile(r"\d{5}(-[A-Za-z0-9]+)?-[0-9a-f]+")


def _file_rows(fs: Store, path: str, fmt: str, fields: list[pa.Field], header: bool) -> Iterator[
        list[Any]]:
    names = [f.name for f in fields]
    if fmt == "parquet":
        with fs.open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(65_536, columns=names):
                columns = [c.cast(plain_storage(c.type)).to_pylist() for c in batch.columns]
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


def output_records(output: str, metadata: str = "") -> BucketingGlobalCommitter:
    """The records of a copy's output (where its copy.json, owner and commit log are)."""
    fs, base, meta = metadata_location(output, metadata)
    return BucketingGlobalCommitter(fs, base, PartNames("part", ""), meta=meta)


def read_layout(records: BucketingGlobalCommitter, output: str) -> dict[str, Any]:
    path = join(records.meta, "copy.json")
    try:
        return dict(json.loads(records.fs.read_text(path)))
    except (FileNotFoundError, NotADirectoryError):
        raise SinkError(f"{redact(output)} has no records of a copy ({path} is missing): it was not written by "
                        "splitsource copy") from None
    except OSError as exc:
        raise SinkError(f"{redact(output)} has no readable records of a copy ({path}: {exc}): it was not written "
                        "by splitsource copy") from None
    except (ValueError, UnicodeDecodeError):
        raise SinkError(f"{path} is corrupt") from None


def digest_output(output: str, layout: dict[str, Any], schema: pa.Schema, volatile: Iterable[str] = ()) -> Digest:
    """Digest every finished part file under ``output`` (what a reader of the directory would read), decoding
    each column as ``schema`` says; of the ``volatile`` columns only whether they are null."""
    changing = set(volatile)
    fs, base = resolve_filesystem(output)
    bucket_columns = _bucket_columns(layout)
    fields = [f for f in schema if f.name not in bucket_columns]
    fmt = layout["format"]
    digest = Digest()
    for path, relative in _files(fs, base):
        suffix = _bucket_suffix(_path_values(relative.rpartition("/")[0], bucket_columns))
        try:
            for row in _file_rows(fs, path, fmt, fields, bool(layout.get("csv_header", True))):
                digest.add(_row_bytes((_compared(v, f.type, f.name in changing)
                                       for v, f in zip(row, fields, strict=True)), suffix))
        except SinkError:
            raise
        except (ValueError, KeyError, TypeError, pa.ArrowException, UnicodeDecodeError) as exc:
            raise SinkError(f"{path}: cannot be read as {fmt} of the source's columns: {exc}") from None
    return digest


def check_splits(source: Source[Any, Any, Any, Any], output: str, checkpoint: str | None,
                 records: BucketingGlobalCommitter) -> SplitCheck:
    """Count, split by split, the source's rows of every split in the copy's ledger; compare with the ledger."""
    if checkpoint is None:
        owner = read_owner(records)
        if owner is None or not owner.get("checkpoint"):
            return SplitCheck(note=f"{redact(output)} names no checkpoint (its records hold no owner.json)")
        checkpoint = str(owner["checkpoint"])
        default = sibling_uri(output, ".checkpoint")
        if checkpoint == redact(default):  # kept without its credentials: the default beside the output has them
            checkpoint = default
    elif not is_uri(checkpoint):
        checkpoint = os.path.abspath(checkpoint)
    ledger = read_ledger(checkpoint, records.last_stream_batch)
    if ledger is None:
        return SplitCheck(note=f"checkpoint {redact(checkpoint)} has no split ledger (it was removed, or the copy "
                               "was made by a splitsource that kept none)")
    serializer = source.split_serializer()
    pending = iter([read_envelope(serializer, c.split) for c in ledger.values()])
    metrics = ReaderMetrics()
    reader = SourceReader(source, lambda: next(pending, None), name="verify-splits", metrics=metrics)
    try:
        for _ in reader.read():
            pass
    finally:
        reader.close()
    differ = tuple(SplitDifference(c.split_id, c.rows, metrics.split_rows.get(c.split_id, 0))
                   for c in ledger.values() if metrics.split_rows.get(c.split_id, 0) != c.rows)
    return SplitCheck(len(ledger), sum(c.rows for c in ledger.values()), differ)


def verify(source: Source[Any, Any, Any, Any], output: str, checkpoint: str | None = None,
           metadata: str = "") -> VerifyResult:
    """Compare the committed output with the source; on a mismatch, also the copy's rows per split (from the split
    ledger of ``checkpoint``, by default the one the output's owner file names) with the source's. ``metadata``:
    where the copy kept the output's records, if it was given that sink option."""
    records = output_records(output, metadata)
    layout = read_layout(records, output)
    source_digest, independent = digest_source(source, layout)
    owner = read_owner(records)
    foreign = foreign_files(output, layout, str(owner["token"]) if owner else None, records.meta)
    result = VerifyResult(source_digest, digest_output(output, layout, source.schema(), source.volatile_columns()),
                          independent, foreign=foreign)
    if result.match:
        return result
    return replace(result, splits=check_splits(source, output, checkpoint, records))
