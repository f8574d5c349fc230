"""Bucketers: which directory under the base path each row goes to.

A bucket is a relative path of one or more *segments*. Every segment is made of user-controlled text (a column
value, a formatted date) passed through :func:`encode_segment`, so no value can climb out of the base path, hide a
file from readers or clash with the sink's own files:

- bytes outside ``A-Z a-z 0-9 _ - .`` are percent-encoded as UTF-8 (``/`` → ``%2F``, NUL → ``%00``, ``=`` → ``%3D``,
  ``%`` → ``%25``); this is the escaping Hive and Spark's partition discovery undo when reading;
- a leading ``.`` or ``_`` is percent-encoded too (``..`` → ``%2E.``, ``_x`` → ``%5Fx``), because readers skip
  names starting with them and ``.``/``..`` are not names;
- the empty string becomes ``__EMPTY__`` and a null ``__HIVE_DEFAULT_PARTITION__`` (which Spark reads back as
  null); encoded values never start with ``_``, so neither can be forged by a value.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyarrow as pa
import pyarrow.compute as pc

from splitsource._errors import OptionsError

__all__ = ["BasePathBucketer", "Bucketer", "ColumnBucketer", "DateTimeBucketer", "encode_segment"]

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
NULL_SEGMENT = "__HIVE_DEFAULT_PARTITION__"  # what Spark's partition discovery reads back as null
EMPTY_SEGMENT = "__EMPTY__"


def encode_segment(value: str | None) -> str:
    """One safe directory name for ``value`` (see the module docstring for the rule)."""
    if value is None:
        return NULL_SEGMENT
    if value == "":
        return EMPTY_SEGMENT
    out = []
    for i, byte in enumerate(value.encode("utf-8")):
        if byte in _SAFE and not (i == 0 and byte in b"._"):
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


class Bucketer(ABC):
    """Splits a batch by bucket. Implementations are immutable and cheap to copy to executors."""

    #: columns that the bucket path carries and the files therefore leave out (Hive style)
    columns: tuple[str, ...] = ()

    @abstractmethod
    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        """``(bucket, rows)`` pairs covering every row of ``batch`` once; ``now`` is processing time (epoch s)."""


class BasePathBucketer(Bucketer):
    """Everything in the base path itself (bucket ``""``)."""

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        return [("", batch)]


_JAVA_TOKENS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_TOKEN_RE = re.compile("|".join(sorted(_JAVA_TOKENS, key=len, reverse=True)) + "|[A-Za-z]")


class DateTimeBucketer(Bucketer):
    """Buckets by processing time, formatted with a Java-style pattern (default ``yyyy-MM-dd--HH``) in a zone.

    Supported letters: ``yyyy yy MM dd HH mm ss``; ``/`` in the pattern makes nested directories; any other
    letter is refused (it would silently mean something else than in Java).
    """

    def __init__(self, pattern: str = "yyyy-MM-dd--HH", zone: str = "UTC") -> None:
        try:
            self._zone = ZoneInfo(zone) if zone.upper() != "UTC" else timezone.utc
        except (ZoneInfoNotFoundError, ValueError):
            raise OptionsError(f"option 'timezone': unknown time zone {zone!r}") from None
        self._segments = [self._compile(part, pattern) for part in pattern.split("/")]
        self.pattern = pattern

    @staticmethod
    def _compile(part: str, pattern: str) -> str:
        if not part:
            raise OptionsError(f"option 'bucket_format': {pattern!r} has an empty path segment")

        def token(m: re.Match[str]) -> str:
            if m.group(0) not in _JAVA_TOKENS:
                raise OptionsError(
                    f"option 'bucket_format': letter {m.group(0)!r} in {pattern!r} is not supported; "
                    f"use {' '.join(_JAVA_TOKENS)} (quote nothing: other characters are kept as they are)"
                )
            return _JAVA_TOKENS[m.group(0)]

        return _TOKEN_RE.sub(token, part.replace("%", "%%"))

    def bucket_at(self, now: float) -> str:
        moment = datetime.fromtimestamp(now, tz=self._zone)
        return "/".join(encode_segment(moment.strftime(segment)) for segment in self._segments)

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        return [(self.bucket_at(now), batch)]


class ColumnBucketer(Bucketer):
    """Buckets by the values of some columns: ``col1=value1/col2=value2`` (Hive style, values encoded).

    The bucket columns are left out of the files, as Spark's ``partitionBy`` does; Spark's readers put them back
    from the path.
    """

    def __init__(self, columns: Sequence[str]) -> None:
        if not columns:
            raise OptionsError("option 'bucket_columns': name at least one column for bucketer 'columns'")
        self.columns = tuple(columns)

    def check(self, schema: pa.Schema) -> None:
        missing = [c for c in self.columns if c not in schema.names]
        if missing:
            raise OptionsError(f"option 'bucket_columns': no column {', '.join(map(repr, missing))} in the data; "
                               f"columns: {', '.join(schema.names)}")
        if len(self.columns) == len(schema.names):
            raise OptionsError("option 'bucket_columns': at least one column must stay in the files")

    def split(self, batch: pa.RecordBatch, now: float) -> list[tuple[str, pa.RecordBatch]]:
        keep = [i for i, name in enumerate(batch.schema.names) if name not in self.columns]
        data = batch.select(keep)
        keys = pa.table([pc.cast(batch.column(c), pa.string()) for c in self.columns], names=list(self.columns))
        if len(self.columns) == 1:
            # the common case, vectorised: one pass to code the values, one filter per distinct value
            encoded = keys.column(0).combine_chunks().dictionary_encode()
            out = [
                (self._path([value]), data.filter(pc.equal(encoded.indices, code)))
                for code, value in enumerate(encoded.dictionary.to_pylist())
            ]
            if encoded.null_count:
                out.append((self._path([None]), data.filter(pc.is_null(encoded.indices))))
            return out
        out = []
        for combo in keys.group_by(list(self.columns)).aggregate([]).to_pylist():
            mask = None
            for name in self.columns:
                column = keys.column(name)
                value = combo[name]
                part = pc.is_null(column) if value is None else pc.fill_null(pc.equal(column, value), False)
                mask = part if mask is None else pc.and_(mask, part)
            out.append((self._path([combo[name] for name in self.columns]), data.filter(mask)))
        return out

    def _path(self, values: Sequence[str | None]) -> str:
        return "/".join(f"{encode_segment(name)}={encode_segment(v)}" for name, v in zip(self.columns, values,
                                                                                         strict=True))
