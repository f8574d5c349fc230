"""Planning a PostgreSQL read: one exported snapshot, and key or block ranges of about ``split_size_mb`` each.

The enumerator opens a REPEATABLE READ transaction, exports its snapshot (``pg_export_snapshot()``, as
``pg_dump -j`` does) and holds it open for the run: every reader imports it, so a run reads the table at one
instant while writers go on. The plan is cut inside that snapshot:

- **key ranges** (a primary key, or a unique index on not-null columns, of orderable types): boundaries at the
  quantiles of a block sample of the key (``TABLESAMPLE SYSTEM``), so each range holds about as many live rows as
  the next, however the keys are skewed and whatever a mass delete left behind;
- **block ranges** (``ctid``, PostgreSQL 14 and later): runs of blocks of the relation, the last one open-ended.

A partitioned table is planned partition by partition. A restored enumerator (a re-run) keeps the plan and
exports a new snapshot; block ranges are refused then if the table changed since the plan (``guard``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from connectors.postgres._catalog import Table, ident
from connectors.postgres._options import PostgresOptions
from connectors.postgres._reader import read_keys
from connectors.postgres._session import connect, errors_in_one_line
from connectors.postgres._splits import PostgresPosition, PostgresSplit
from splitsource import CheckpointError, OptionsError, SplitEnumerator, SplitEnumeratorContext

__all__ = ["PostgresEnumerator"]

BLOCK = 8192
SAMPLE_BLOCKS = 2000  # at least this many blocks sampled per relation (or all of a smaller one)
SAMPLE_PER_SPLIT = 64  # and at least this many per split
# rows carry 32-bit transaction ids, compared by age(): an incremental run tells apart 2^31 since the last, less a
# margin for the transactions that begin while it runs
XID_WINDOW = (1 << 31) - (1 << 27)


class PostgresEnumerator(SplitEnumerator[PostgresSplit, PostgresPosition]):
    def __init__(self, options: PostgresOptions, table: Table, context: SplitEnumeratorContext | None = None,
                 position: PostgresPosition | None = None, pending: Iterable[PostgresSplit] = (),
                 since: int | None = None, last: Mapping[str, Any] | None = None) -> None:
        super().__init__(context, pending)
        self._options, self._table = options, table
        self._position = position
        self._conn: Any = None
        self._snapshot = ""
        self._since = since  # an incremental run's: the last run's snapshot's xmin
        self._last = dict(last or {})  # and the last run's whole instant
        self._instant: dict[str, Any] = {}
        self._counters = ""  # the table's change counters before the snapshot (_counters)
        self._keys_read = False  # keys() was asked for: this run finds the deletes

    def start(self) -> None:
        options = self._options
        self._conn = connect(options)
        with errors_in_one_line(options):
            table = self._table
            # counted before the snapshot is taken: a change these counters include, the snapshot sees (so not
            # with a snapshot the user exported before)
            counters = _counters(self._conn, table) if table.server_version >= 150000 and not options.snapshot \
                else ""
            self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if options.snapshot:
                self._conn.execute(f"SET TRANSACTION SNAPSHOT '{_snapshot_id(options.snapshot)}'")
            else:
                self._snapshot = self._conn.row("SELECT pg_export_snapshot()")[0]
            if table.server_version >= 130000:
                xmin, xmax = self._conn.row(
                    "SELECT pg_snapshot_xmin(s)::text::int8, pg_snapshot_xmax(s)::text::int8 "
                    "FROM pg_current_snapshot() s")
                self._instant = {"xmin": xmin, "xmax": xmax}
                self._counters = counters
                if self._since is not None and xmax - self._since >= XID_WINDOW:
                    raise OptionsError(
                        f"{table.label}: {xmax - self._since:,} transactions since the last run's snapshot, more "
                        "than a row's 32-bit transaction id tells apart: copy the table whole to a new output")
            guard = _guard(self._conn, table)
            if self._position is None and self._unchanged(counters):
                self._instant = self._last  # no split, and the next run reads since the same instant
                self._position = PostgresPosition((), 0, guard)
            elif self._position is None:
                self._position = PostgresPosition(tuple(self._plan(table)), 0, guard)
            elif any(s.by_blocks for s in self._position.splits) and guard != self._position.guard:
                raise CheckpointError(
                    f"{table.label} changed since this copy began, and its block-range splits (ctid) cannot go on "
                    "at another instant without losing or repeating rows; run it again with a new checkpoint and "
                    "output (or --overwrite), or with split_by=key on a table with a key")

    def _unchanged(self, counters: str) -> bool:
        """Whether an incremental run finds nothing to read: the table's change counters are the last run's (and
        the last run's instant is young enough to keep: a run does not hand it on for ever)."""
        if self._since is None or not counters or counters != self._last.get("changes"):
            return False
        return int(self._instant["xmax"]) - self._since < XID_WINDOW // 2

    def _plan(self, table: Table) -> list[PostgresSplit]:
        by_key = self._options.split_by == "key" or (self._options.split_by == "auto" and table.key)
        if self._options.split_by == "key" and not table.key:
            raise OptionsError(f"connector 'postgres': option 'split_by': key, but {table.label} has no primary key "
                               "or unique index on not-null columns of an orderable type; use split_by=blocks")
        if not by_key and table.server_version < 140000:
            raise OptionsError(f"connector 'postgres': {table.label} has no usable key, and block ranges need "
                               "PostgreSQL 14 or later (TID range scans)")
        target = self._options.split_size_mb * 1024 * 1024
        splits: list[PostgresSplit] = []
        for relation in table.relations:
            size, blocks, tuples = self._conn.row(
                "SELECT pg_table_size(c.oid), pg_relation_size(c.oid), c.reltuples FROM pg_class c "
                "WHERE c.oid = %s::regclass", relation)
            count = max(1, math.ceil(size / target))
            blocks //= BLOCK
            row_bytes = max(1, int(size / tuples)) if tuples and tuples > 0 else 100
            if by_key:
                bounds = self._key_bounds(table, relation, count, blocks) if count > 1 else []
                edges: list[tuple[str, ...] | None] = [None, *bounds, None]
                for lo, hi in zip(edges, edges[1:], strict=False):
                    splits.append(PostgresSplit(len(splits), relation, lo=lo, hi=hi, size=size // (len(edges) - 1),
                                                row_bytes=row_bytes))
            else:
                step = max(1, math.ceil(blocks / count))
                for first in range(0, max(blocks, 1), step):
                    end = first + step if first + step < blocks else -1
                    splits.append(PostgresSplit(len(splits), relation, first_block=first, end_block=end,
                                                size=size * min(step, max(blocks, 1)) // max(blocks, 1),
                                                row_bytes=row_bytes))
        return splits

    def _key_bounds(self, table: Table, relation: str, count: int, blocks: int) -> list[tuple[str, ...]]:
        """``count - 1`` boundaries at the quantiles of a block sample of the key (fewer where they coincide)."""
        percent = min(100.0, 100.0 * max(SAMPLE_BLOCKS, SAMPLE_PER_SPLIT * count) / max(blocks, 1))
        keys = ", ".join(f"{ident(c.name)}::text AS __k{i}" for i, c in enumerate(table.key))
        # qualified: an output column of the same name (the text) would be sorted as text
        order = ", ".join(f"{relation}.{ident(c.name)}" for c in table.key)
        where = f" WHERE {self._options.where}" if self._options.where else ""
        sample = self._conn.rows(
            f"SELECT {keys} FROM {relation} TABLESAMPLE SYSTEM ({percent}) REPEATABLE (0){where} ORDER BY {order}"
        )
        bounds: list[tuple[str, ...]] = []
        for i in range(1, count):
            if not sample:
                break
            bound = tuple(sample[len(sample) * i // count])
            if bound != (bounds[-1] if bounds else None) and bound != tuple(sample[0]):
                bounds.append(bound)
        return bounds

    def generate_split(self) -> PostgresSplit | None:
        assert self._position is not None, "start() first"
        position = self._position
        if position.next_index >= len(position.splits):
            return None
        self._position = PostgresPosition(position.splits, position.next_index + 1, position.guard)
        return position.splits[position.next_index]

    def position(self) -> PostgresPosition:
        assert self._position is not None, "start() first"
        return self._position

    def estimated_total_splits(self) -> int | None:
        return len(self._position.splits) if self._position is not None else None

    def instant(self) -> dict[str, Any]:
        """The run's snapshot: the oldest transaction it saw running, and the first it did not see (64-bit); and
        the table's change counters, where the run reads all that changed, deletes included (a full copy, or a run
        that read the keys), so that a next run finding the same counters has nothing to read."""
        if self._counters and self._instant is not self._last and (self._since is None or self._keys_read):
            return self._instant | {"changes": self._counters}
        return self._instant

    def keys(self) -> Iterator[pa.RecordBatch] | None:
        """The table's keys in the run's snapshot, as the copy's readers type them (read as a table of the key
        columns alone), a scan of each relation."""
        table = self._table
        if not table.key or any(k not in table.columns for k in table.key) or self._instant is self._last:
            return None
        self._keys_read = True
        options = dataclasses.replace(self._options, snapshot=self._snapshot or self._options.snapshot)
        return read_keys(options, dataclasses.replace(table, columns=table.key))

    def reader_options(self) -> dict[str, str]:
        """The run's snapshot, and the table as described, for every reader of this run."""
        return {"described": self._table.catalog} | ({"snapshot": self._snapshot} if self._snapshot else {})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # ends the transaction: its snapshot can be imported no more
            self._conn = None
        super().close()


def _guard(conn: Any, table: Table) -> str:
    """What changes whenever a row of the table does: each relation's file and its counts of inserted, updated and
    deleted rows (statistics a SELECT-only role can read; the server publishes them within about a second)."""
    parts = []
    for relation in table.relations:
        row = conn.row(
            "SELECT pg_relation_filenode(%s::regclass), pg_stat_get_tuples_inserted(%s::regclass), "
            "pg_stat_get_tuples_updated(%s::regclass), pg_stat_get_tuples_deleted(%s::regclass)",
            *(relation,) * 4)
        parts.append(f"{relation}:{':'.join(map(str, row))}")
    return ";".join(parts)


def _counters(conn: Any, table: Table) -> str:
    """A digest of what changes whenever a row of the table does (:func:`_guard`: each relation's file and its
    counts of rows inserted, updated and deleted) and whenever those counts could start over (the server's start,
    the database's statistics reset); empty where the server counts nothing (``track_counts`` off). A backend
    publishes its transactions' counts after they commit (PostgreSQL 15 on: into shared memory, within seconds;
    before 15 they went by UDP, which may drop them, so an older server gets no digest): a run that finds them
    unchanged reads nothing and hands on the last run's instant, so the next run reads what they did not show
    yet."""
    guard = _guard(conn, table)
    on, started, reset = conn.row(
        "SELECT current_setting('track_counts')::bool, pg_postmaster_start_time()::text, "
        "(SELECT stats_reset::text FROM pg_stat_database WHERE datname = current_database())")
    if not on:
        return ""
    return hashlib.sha256(f"{guard};{started};{reset}".encode()).hexdigest()[:16]


def _snapshot_id(text: str) -> str:
    if not all(c.isalnum() or c == "-" for c in text):
        raise OptionsError(f"connector 'postgres': option 'snapshot': {text!r} is not a snapshot id "
                           "(pg_export_snapshot() returns one like 00000003-0000001B-1)")
    return text
