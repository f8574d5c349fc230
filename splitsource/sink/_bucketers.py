"""Bucketers: which directory under the base path each row goes to.

A bucket is a relative path of one or more *segments* made of user-controlled text (a column value, a formatted
date). Column buckets are Hive-style ``name=value`` segments escaped exactly as Spark's own writer escapes them
(``ExternalCatalogUtils.escapePathName``), so that Spark's partition discovery, DuckDB, Polars and
pyarrow.dataset decode every value back (tested with all four):

- the ASCII characters ``"`` ``#`` ``%`` ``'`` ``*`` ``/`` ``:`` ``=`` ``?`` backslash ``{`` ``[`` ``]`` ``^``, the
  control characters U+0000..U+001F and U+007F become ``%XX`` (U+0000 is not in Spark's list: no file system
  takes it in a name); everything else is kept as it is, non-ASCII text included. Spark unescapes ``%XX`` one
  byte at a time into characters, so a percent-encoded UTF-8 value would come back garbled (``ü`` as ``Ã¼``);
- null and the empty string become ``__HIVE_DEFAULT_PARTITION__``, which every reader reads back as null (as
  with Spark's own writer: no convention carries ``''``);
- a value that *is* the text ``__HIVE_DEFAULT_PARTITION__`` is written ``%5F_HIVE_DEFAULT_PARTITION__``: Spark
  and DuckDB read the text back, Polars and pyarrow.dataset decode it first and read null;
- a name starting with ``.`` gets it escaped (readers skip hidden names), and nothing can climb out of the base
  path: ``/`` is always escaped, and ``.``/``..`` can only appear after ``name=``;
- a segment longer than 255 bytes (the limit of a file name) is refused with an error naming the column.

Date-time buckets are formatted dates, escaped by the same rule (a leading ``_`` too, which readers skip).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyarrow as pa

from splitsource._errors import OptionsError, SinkError

__all__ = ["BasePathBucketer", "Bucketer", "ColumnBucketer", "DateTimeBucketer", "decode_values", "encode_segment",
           "encode_value"]

_ESCAPED = frozenset(chr(c) for c in range(0x20)) | frozenset('"#%\'*/:=?\\\x7f{[]^')
NULL_SEGMENT = "__HIVE_DEFAULT_PARTITION__"  # what Spark, DuckDB, Polars and pyarrow.dataset read as null
MAX_SEGMENT_BYTES = 255


def _escape(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def encode_value(value: str | None) -> str:
    """A partition value as Spark's writer puts it in ``name=value`` (see the module docstring)."""
    if value is None or value == "":
        return NULL_SEGMENT
    if value == NULL_SEGMENT:
        return "%5F" + value[1:]
    return _escape(value)


def decode_values(directory: str, columns: Sequence[str]) -> dict[str, str | None]:
    """The values of ``columns`` that the ``name=value`` segments of a bucket ``directory`` hold (the inverse of
    :func:`encode_value`; a column it does not name is None)."""
    found: dict[str, str | None] = {}
    for segment in directory.split("/"):
        name, eq, value = segment.partition("=")
        if eq:
            found[unquote(name)] = None if value == NULL_SEGMENT else unquote(value)
    return {c: found.get(c) for c in columns}


def encode_segment(text: str) -> str:
    """A whole directory name for ``text``: escaped as a value, and a leading ``.`` or ``_`` escaped too."""
    escaped = _escape(text) if text else "%00"
    return f"%{ord(escaped[0]):02X}{escaped[1:]}" if escaped[0] in "._" else escaped


def _datetime_segment(text: str) -> str:
    """A formatted date-time directory: ``name=value`` as a Hive-style segment, anything else as one name."""
    name, equals, value = text.partition("=")
    if equals and name:
        return f"{encode_segment(name)}={encode_value(value)}"
    return encode_segment(text)


def _checked(segment: str, what: str) -> str:
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        raise SinkError(f"{what}: the bucket directory name would be {len(segment.encode('utf-8'))} bytes, over the "
                        f"{MAX_SEGMENT_BYTES} bytes a file name can hold (value starts {segment[:40]!r}); bucket by a "
                        "shorter column")
    return segment


def _null_if_empty(column: pa.Array) -> pa.Array:
    """'' and null share a directory name (as in Spark): one bucket, not two with the same path."""
    import pyarrow.compute as pc
    return pc.if_else(pc.fill_null(pc.equal(column, ""), False), pa.scalar(None, pa.string()), column)


class Bucketer(ABC):
    """Splits a batch by bucket. Implementations are immutable and cheap to copy to executors."""

    #: columns that the bucket path carries and the files therefore leave out (Hive style), unless ``in_files``
    columns: tuple[str, ...] = ()
    in_files: bool = False

    @abstractmethod
    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        """``(bucket, rows)`` pairs covering every row of ``batch`` once; ``now`` is processing time (epoch s)."""


class BasePathBucketer(Bucketer):
    """Everything in the base path itself (bucket ``""``)."""

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        return [("", batch)]


_JAVA_TOKENS: dict[str, Callable[[datetime], str]] = {
    "yyyy": lambda t: f"{t.year:04d}", "yy": lambda t: f"{t.year % 100:02d}", "MM": lambda t: f"{t.month:02d}",
    "M": lambda t: str(t.month), "dd": lambda t: f"{t.day:02d}", "d": lambda t: str(t.day),
    "HH": lambda t: f"{t.hour:02d}", "H": lambda t: str(t.hour), "mm": lambda t: f"{t.minute:02d}",
    "ss": lambda t: f"{t.second:02d}",
}
_TOKEN_RE = re.compile("'(?:[^']|'')*'|" + "|".join(sorted(_JAVA_TOKENS, key=len, reverse=True)) + "|[A-Za-z]|'")

#: Hive-style: a column ``dt`` (a date) and a column ``hour`` for every reader that discovers partitions
DEFAULT_DATETIME_PATTERN = "'dt='yyyy-MM-dd/'hour='H"


class DateTimeBucketer(Bucketer):
    """Buckets by processing time, formatted with a Java-style pattern in a zone.

    Supported letters: ``yyyy yy MM M dd d HH H mm ss`` (one letter: no leading zero); text in single quotes
    is kept as it is (``''`` is a quote); ``/`` in the pattern makes nested directories; any other letter is
    refused (it would silently mean something else than in Java). A directory whose text has ``=`` is a
    Hive-style ``name=value`` segment, each side escaped as Spark escapes them: the default
    ``'dt='yyyy-MM-dd/'hour='H`` gives ``dt=2026-11-24/hour=8``, which Spark, DuckDB, Polars and
    pyarrow.dataset read back as a date ``dt`` and an integer ``hour`` (``hour=08`` would stay text in DuckDB).
    """

    def __init__(self, pattern: str = DEFAULT_DATETIME_PATTERN, zone: str = "UTC") -> None:
        try:
            self._zone = ZoneInfo(zone) if zone.upper() != "UTC" else timezone.utc
        except (ZoneInfoNotFoundError, ValueError):
            raise OptionsError(f"option 'timezone': unknown time zone {zone!r}") from None
        self._segments = [self._compile(part, pattern) for part in self._split(pattern)]
        self.pattern = pattern

    @staticmethod
    def _split(pattern: str) -> list[str]:
        """The pattern's directory parts: cut at each ``/`` outside quotes."""
        parts, current, quoted = [], "", False
        for char in pattern:
            if char == "'":
                quoted = not quoted
            if char == "/" and not quoted:
                parts.append(current)
                current = ""
            else:
                current += char
        return [*parts, current]

    @staticmethod
    def _compile(part: str, pattern: str) -> list[str | Callable[[datetime], str]]:
        """A directory's pattern as literal texts and field formatters, in order."""
        if not part:
            raise OptionsError(f"option 'bucket_format': {pattern!r} has an empty path segment")
        pieces: list[str | Callable[[datetime], str]] = []
        last = 0
        for m in _TOKEN_RE.finditer(part):
            pieces.append(part[last:m.start()])
            text, last = m.group(0), m.end()
            if text == "'":
                raise OptionsError(f"option 'bucket_format': {pattern!r} has a quote that is not closed")
            if text.startswith("'"):
                pieces.append("'" if text == "''" else text[1:-1].replace("''", "'"))
            elif text in _JAVA_TOKENS:
                pieces.append(_JAVA_TOKENS[text])
            else:
                raise OptionsError(
                    f"option 'bucket_format': letter {text!r} in {pattern!r} is not supported; "
                    f"use {' '.join(_JAVA_TOKENS)}, and put other text in single quotes ('dt=')"
                )
        pieces.append(part[last:])
        return [p for p in pieces if p != ""]

    def bucket_at(self, now: float) -> str:
        moment = datetime.fromtimestamp(now, tz=self._zone)
        return "/".join(
            _checked(_datetime_segment("".join(p if isinstance(p, str) else p(moment) for p in segment)),
                     "option 'bucket_format'")
            for segment in self._segments)

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        return [(self.bucket_at(now), batch)]


class ColumnBucketer(Bucketer):
    """Buckets by the values of some columns: ``col1=value1/col2=value2`` (Hive style, values encoded).

    The bucket columns are left out of the files, as Spark's ``partitionBy`` does; Spark's readers put them back
    from the path. ``in_files``: the files keep them too (an Iceberg table's files hold their partition columns).
    """

    def __init__(self, columns: Sequence[str], in_files: bool = False) -> None:
        if not columns:
            raise OptionsError("option 'bucket_columns': name at least one column for bucketer 'columns'")
        self.columns = tuple(columns)
        self.in_files = in_files
        self._paths: dict[tuple[str | None, ...], str] = {}

    def check(self, schema: pa.Schema) -> None:
        missing = [c for c in self.columns if c not in schema.names]
        if missing:
            raise OptionsError(f"option 'bucket_columns': no column {', '.join(map(repr, missing))} in the data; "
                               f"columns: {', '.join(schema.names)}")
        if len(self.columns) == len(schema.names) and not self.in_files:
            raise OptionsError("option 'bucket_columns': at least one column must stay in the files")

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        import pyarrow.compute as pc
        data = batch if self.in_files else batch.select(
            [i for i, name in enumerate(batch.schema.names) if name not in self.columns])
        keys = pa.table([_null_if_empty(pc.cast(batch.column(c), pa.string())) for c in self.columns],
                        names=list(self.columns))
        # one pass whatever the number of buckets: code every row's key (nulls get a code of their own), sort the
        # rows by code once, and cut the sorted batch at each change of code (a filter per bucket was
        # O(rows x buckets))
        codes: pa.Array | None = None
        dictionaries: list[list[str | None]] = []
        space = 1
        for name in self.columns:
            encoded = keys.column(name).combine_chunks().dictionary_encode(null_encoding="encode")
            dictionaries.append(encoded.dictionary.to_pylist())
            space *= max(len(encoded.dictionary), 1)
            column_codes = encoded.indices.cast(pa.int64())
            codes = column_codes if codes is None else pc.add(pc.multiply(codes, len(encoded.dictionary)),
                                                              column_codes)
        if codes is not None and space < 1 << 62:
            order = pc.sort_indices(codes)
            runs = pc.run_end_encode(codes.take(order))
            ordered = data.take(order)
            out, start = [], 0
            single = dictionaries[0] if len(dictionaries) == 1 else None
            for end, code in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
                if single is not None:
                    path = self._path((single[code],))
                else:
                    values: list[str | None] = []
                    for dictionary in reversed(dictionaries):
                        code, index = divmod(code, len(dictionary))
                        values.append(dictionary[index])
                    path = self._path(values[::-1])
                out.append((path, ordered.slice(start, end - start)))
                start = end
            return out
        out = []  # keys too many to code in one integer: a filter per distinct combination
        for combo in keys.group_by(list(self.columns)).aggregate([]).to_pylist():
            mask = None
            for name in self.columns:
                column = keys.column(name)
                value = combo[name]
                part = pc.is_null(column) if value is None else pc.fill_null(pc.equal(column, value), False)
                mask = part if mask is None else pc.and_(mask, part)
            out.append((self._path([combo[name] for name in self.columns]), data.filter(mask)))
        return out

    _CACHED = 1 << 16  # bucket paths remembered (a key seen again is not escaped again), then forgotten at once

    def _path(self, values: Sequence[str | None]) -> str:
        key = tuple(values)
        found = self._paths.get(key)
        if found is None:
            found = "/".join(_checked(f"{encode_segment(name)}={encode_value(v)}", f"bucket column '{name}'")
                             for name, v in zip(self.columns, values, strict=True))
            if len(self._paths) >= self._CACHED:
                self._paths.clear()
            self._paths[key] = found
        return found
