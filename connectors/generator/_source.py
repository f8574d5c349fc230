"""GeneratorSource: deterministic synthetic rows on the short path (KeyRangeSource), a row's number its key.

Options (all optional):

=================  ==========================  ==============================================================
option             default                     meaning
=================  ==========================  ==============================================================
rows               1000                        number of rows
appended           0                           rows added after them: the same source grown (not part of a
                                               copy's identity; an incremental copy's next run reads them)
seed               0                           changes every generated value
columns            id:bigint,value:double,     comma-separated ``name:type``; types bigint, int, double,
                   name:string                 string, boolean, timestamp, binary; a trailing ``?`` makes
                                               the column nullable (nulls at ``null_fraction``). A bigint
                                               column named ``id`` holds the row number 0..rows-1.
null_fraction      0.1                         share of nulls in nullable columns
split_size_mb      32                          target split size (estimated bytes)
split_rows         0                           rows per split; overrides split_size_mb when > 0
batch_rows         65536                       rows per fetch
fetch_delay_ms     0                           sleep per fetch, to simulate slow I/O (wake_up cuts it short)
fail_at_row        -1                          inject a failure when the reader reaches this row
fail_times         1                           how many times the injected failure fires (per reader)
fail_kind          transient                   ``transient`` (retried from the split state) or ``fatal``
=================  ==========================  ==============================================================

Example::

    spark.read.format("splitsource").option("connector", "generator").option("rows", "1000000").load()

Every value is a pure function of (seed, column position, row number), so any split of the rows, read in any
order, on any machine, yields the same rows: what makes the generator a good conformance subject.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serializers import SimpleVersionedSerializer, dataclass_serializer, refused
from splitsource import (
    KeyRange,
    KeyRangePosition,
    KeyRangeSource,
    OptionsError,
    SplitReadError,
    TransientSplitReadError,
    option,
)

__all__ = ["GeneratorOptions", "GeneratorSource", "generate_batch"]

_TYPES: dict[str, tuple[pa.DataType, int]] = {
    "bigint": (pa.int64(), 8),
    "int": (pa.int32(), 4),
    "double": (pa.float64(), 8),
    "string": (pa.string(), 14),
    "boolean": (pa.bool_(), 1),
    "timestamp": (pa.timestamp("us", tz="UTC"), 8),
    "binary": (pa.binary(), 12),
}
_BEFORE = ("a generator checkpoint written before its rows were key ranges (no release wrote one): copy again "
           "with --overwrite")
_EPOCH_2020_US = 1_577_836_800_000_000
_FIVE_YEARS_US = 5 * 365 * 86_400 * 1_000_000


@dataclass(frozen=True)
class Column:
    name: str
    type_name: str
    nullable: bool


def parse_columns(spec: str) -> tuple[Column, ...]:
    columns = []
    for part in spec.split(","):
        name, sep, type_name = part.strip().partition(":")
        nullable = type_name.endswith("?")
        type_name = type_name.rstrip("?").strip().lower()
        if not sep or not name.strip():
            raise ValueError(f"column '{part.strip()}' is not name:type")
        if type_name not in _TYPES:
            raise ValueError(f"column '{name}': unknown type '{type_name}'; accepted: {', '.join(_TYPES)}")
        columns.append(Column(name.strip(), type_name, nullable))
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ValueError("column names must be unique")
    return tuple(columns)


@dataclass(frozen=True)
class GeneratorOptions:
    rows: int = option(1000, doc="number of rows", minimum=0)
    appended: int = option(0, doc="rows added after them: the same source, grown (not part of a copy's identity: "
                                  "an incremental copy's next run reads them)", minimum=0)
    seed: int = option(0, doc="changes every generated value")
    columns: tuple[Column, ...] = option(
        parse_columns("id:bigint,value:double,name:string"), doc="name:type[?],... (? marks a nullable column)",
        parse=parse_columns, shown="id:bigint,value:double,name:string",
    )
    null_fraction: float = option(0.1, doc="share of nulls in nullable columns", minimum=0.0, maximum=1.0)
    split_size_mb: float = option(32.0, doc="target split size in MiB (estimated)", minimum=0.001)
    split_rows: int = option(0, doc="rows per split; overrides split_size_mb when > 0", minimum=0)
    batch_rows: int = option(65536, doc="rows per fetch", minimum=1)
    fetch_delay_ms: int = option(0, doc="sleep per fetch (simulated I/O)", minimum=0)
    fail_at_row: int = option(-1, doc="inject a failure at this row (-1: never)")
    fail_times: int = option(1, doc="how often the injected failure fires", minimum=0)
    fail_kind: str = option("transient", doc="transient or fatal", choices=("transient", "fatal"))

    @property
    def total(self) -> int:
        """Every row the source holds: ``rows`` and the ``appended`` ones."""
        return self.rows + self.appended

    @property
    def row_bytes(self) -> int:
        return sum(_TYPES[c.type_name][1] for c in self.columns) or 1

    @property
    def rows_per_split(self) -> int:
        if self.split_rows > 0:
            return self.split_rows
        return max(1, int(self.split_size_mb * 1024 * 1024) // self.row_bytes)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a cheap, well-spread hash of uint64 values."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """:func:`_mix` on one Python integer."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _reference_value(column: Column, row: int, h: int) -> Any:
    kind = column.type_name
    if kind == "bigint":
        return row if column.name == "id" else h - (1 << 64) if h >= 1 << 63 else h
    if kind == "int":
        return h >> 33
    if kind == "double":
        return float(h >> 11) * 2.0**-53
    if kind == "boolean":
        return bool(h & 1)
    if kind == "timestamp":
        return h % _FIVE_YEARS_US + _EPOCH_2020_US
    text = f"{column.name}-{h % 1_000_000_000}"
    return text if kind == "string" else text.encode()


def generate_batch(options: GeneratorOptions, schema: pa.Schema, start: int, end: int) -> pa.RecordBatch:
    """Rows ``start``..``end`` (half-open) as one Arrow batch: the same values for the same rows, always."""
    rows = np.arange(start, end, dtype=np.uint64)
    arrays: list[pa.Array] = []
    with np.errstate(over="ignore"):
        for position, column in enumerate(options.columns):
            salt = np.uint64((options.seed * 1_000_003 + position * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
            h = _mix(rows + salt)
            mask = None
            if column.nullable and options.null_fraction > 0:
                mask = (_mix(h) % np.uint64(1_000_000)) < np.uint64(int(options.null_fraction * 1_000_000))
            arrays.append(_column_values(column, rows, h, mask))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column_values(column: Column, rows: np.ndarray, h: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    kind = column.type_name
    if kind == "bigint":
        values: Any = rows.astype(np.int64) if column.name == "id" else h.view(np.int64)
        return pa.array(values, type=pa.int64(), mask=mask)
    if kind == "int":
        return pa.array((h >> np.uint64(33)).astype(np.int32), type=pa.int32(), mask=mask)
    if kind == "double":
        return pa.array((h >> np.uint64(11)).astype(np.float64) * 2.0**-53, type=pa.float64(), mask=mask)
    if kind == "boolean":
        return pa.array((h & np.uint64(1)).astype(np.bool_), type=pa.bool_(), mask=mask)
    if kind == "timestamp":
        micros = (h % np.uint64(_FIVE_YEARS_US)).astype(np.int64) + _EPOCH_2020_US
        return pa.array(micros, type=pa.timestamp("us", tz="UTC"), mask=mask)
    digits = pc.cast(pa.array((h % np.uint64(1_000_000_000)).astype(np.int64)), pa.string())
    text = pc.binary_join_element_wise(column.name, digits, "-")
    if mask is not None:
        text = pc.if_else(pa.array(mask), pa.nulls(len(text), pa.string()), text)
    return text if kind == "string" else pc.cast(text, pa.binary())


class GeneratorSource(KeyRangeSource[GeneratorOptions]):
    """Deterministic synthetic rows, keyed by their row number, on the short path; see the module docstring for
    options."""

    name = "generator"
    options_class = GeneratorOptions

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()
        if self.options.rows_per_split < 1:
            raise OptionsError("option 'split_rows': must give at least one row per split")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]  # a lock does not pickle; a copy of the source gets its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, _TYPES[c.type_name][0], nullable=True) for c in self.options.columns])

    def start(self) -> None:
        """An incremental run's rows follow the last run's: a generator's rows only grow."""
        after = None if self.since is None else self.since.get("key")
        if after is not None and (not isinstance(after, int) or after >= self.options.total):
            raise OptionsError(f"option 'appended': {self.options.total} rows in all, not more than the "
                               f"{after + 1 if isinstance(after, int) else after} the run before read: a generator's "
                               "rows only grow")

    def last_key(self) -> int | None:
        """The last row's number: rows are only ever added (option ``appended`` grows)."""
        return self.options.total - 1 if self.options.total else None

    def boundaries(self) -> Iterator[tuple[int, int]]:
        per, row_bytes = self.options.rows_per_split, self.options.row_bytes
        return ((upto, per * row_bytes) for upto in range(per - 1, self.options.total - 1, per))

    def page_limit(self, split: KeyRange) -> int:
        return self.options.batch_rows

    def connect(self) -> threading.Event:
        """What a slow fetch waits on (``fetch_delay_ms``): set by :meth:`interrupt`, a reader's wake-up."""
        return threading.Event()

    def interrupt(self, connection: threading.Event) -> None:
        connection.set()

    def split_serializer(self) -> SimpleVersionedSerializer[KeyRange]:
        """The short path's, at version 3: version 1 was the generator's own split, ``[index, start, end, bytes)``,
        whose fields a key range would misread (its end is not a key read); version 2, a key range before cursors."""
        return dataclass_serializer(KeyRange, 3, {1: refused(_BEFORE), 2: lambda fields: [*fields, None]})

    def position_serializer(self) -> SimpleVersionedSerializer[KeyRangePosition]:
        return dataclass_serializer(KeyRangePosition, 4, {1: refused(_BEFORE), 2: refused(_BEFORE),
                                                          3: lambda fields: [*fields, None, ""]})

    def read(self, connection: threading.Event, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        if self.options.fetch_delay_ms and connection.wait(self.options.fetch_delay_ms / 1000):
            raise InterruptedError("woken up")  # the reader asks again from the same row
        start = 0 if split.after is None else split.after + 1
        stop = self.options.total if split.upto is None else split.upto + 1
        end = self._maybe_fail(start, min(start + limit, stop), split.split_id)
        batch = generate_batch(self.options, self.schema(), start, end)
        return batch, (end - 1 if end > start else None), end >= stop

    def identity(self) -> dict[str, Any]:
        o = self.options
        return {  # not the rows appended: a generator that grew is the same source, further on
            "connector": self.name, "rows": o.rows, "seed": o.seed,
            "columns": ",".join(f"{c.name}:{c.type_name}{'?' if c.nullable else ''}" for c in o.columns),
            "null_fraction": o.null_fraction,
            # the split layout: a checkpoint's split indices mean other rows under another size
            "rows_per_split": o.rows_per_split,
        }

    def reference_rows(self, part: int = 0, parts: int = 1) -> Iterator[tuple[Any, ...]]:
        """The rows again, one at a time in plain Python integers: a second implementation of the formula that
        :func:`generate_batch` computes with numpy, for ``splitsource verify``; part ``part`` of ``parts`` is a run
        of rows."""
        o = self.options
        salts = [(o.seed * 1_000_003 + position * 0x9E3779B97F4A7C15) & _MASK64 for position in range(len(o.columns))]
        threshold = int(o.null_fraction * 1_000_000)
        for row in range(*self._reference_range(part, parts)):
            values: list[Any] = []
            for column, salt in zip(o.columns, salts, strict=True):
                h = _mix64((row + salt) & _MASK64)
                if column.nullable and o.null_fraction > 0 and _mix64(h) % 1_000_000 < threshold:
                    values.append(None)
                else:
                    values.append(_reference_value(column, row, h))
            yield tuple(values)

    def _reference_range(self, part: int, parts: int) -> tuple[int, int]:
        rows = self.options.total
        return rows * part // parts, rows * (part + 1) // parts

    def reference_label(self, part: int, parts: int) -> str:
        start, end = self._reference_range(part, parts)
        return f"rows [{start:,}, {end:,})"

    def _maybe_fail(self, start: int, end: int, split_id: str) -> int:
        """Cut the batch at ``fail_at_row`` and fail when a fetch starts there, ``fail_times`` times."""
        at = self.options.fail_at_row
        if at < 0 or not start <= at < end:
            return end
        with self._lock:
            fired = self._failures.get(split_id, 0)
            if fired >= self.options.fail_times:
                return end
            if start < at:
                return at
            self._failures[split_id] = fired + 1
        message = f"injected failure at row {at} (split {split_id}, {fired + 1} of {self.options.fail_times})"
        if self.options.fail_kind == "transient":
            raise TransientSplitReadError(message)
        raise SplitReadError(message)
