"""Planning a PostgreSQL read: one exported snapshot held for the run, and the boundaries of key or block ranges of
about ``split_size_mb`` each.

The plan opens a REPEATABLE READ transaction, exports its snapshot (``pg_export_snapshot()``, as ``pg_dump -j``
does) and holds it open for the run: every reader imports it, so a run reads the table at one instant while
writers go on. The boundaries are cut inside that snapshot:

- **key ranges** (a primary key, or a unique index on not-null columns, of orderable types): boundaries at the
  quantiles of a block sample of the key (``TABLESAMPLE SYSTEM``), so each range holds about as many live rows as
  the next, however the keys are skewed and whatever a mass delete left behind; a partitioned table's key ranges
  span its partitions, which the server reads in key order (an ordered append of each partition's index);
- **block ranges** (``ctid``, PostgreSQL 14 and later): runs of blocks of each relation, a block key being
  ``(relation, block, offset)``; the last range of each relation reads to its end.

A resumed run exports a new snapshot and cuts the key boundaries again (the short path skips, by key, the ranges
it handed out); block ranges resume only on an unchanged table (:meth:`Plan.guard`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from typing import Any

from connectors.postgres._catalog import Table, ident, literal
from connectors.postgres._options import PostgresOptions
from connectors.postgres._session import connect, errors_in_one_line, snapshot_gone
from splitsource import OptionsError

__all__ = ["BLOCK", "END", "LAST_OFFSET", "Plan", "key_row"]

BLOCK = 8192
END = 1 << 32  # a block number after every block of a relation: block key (r, END, 0) ends relation r
LAST_OFFSET = 65535  # a row offset after every row of a block: block key (r, b, LAST_OFFSET) ends block b
SAMPLE_BLOCKS = 2000  # at least this many blocks sampled per table (or all of a smaller one)
SAMPLE_PER_SPLIT = 64  # and at least this many per split
# rows carry 32-bit transaction ids, compared by age(): an incremental run tells apart 2^31 since the last, less a
# margin for the transactions that begin while it runs
XID_WINDOW = (1 << 31) - (1 << 27)


class Plan:
    """The planner's session: a REPEATABLE READ transaction whose snapshot the run's readers import, open until
    :meth:`close`. ``since``: an incremental run's, the last run's snapshot's xmin; ``last``: its whole instant."""

    def __init__(self, options: PostgresOptions, table: Table, since: int | None,
                 last: Mapping[str, Any] | None) -> None:
        self._options, self._table, self._last = options, table, dict(last or {})
        self.snapshot = ""
        self.instant: dict[str, Any] = {}
        self.counters = ""  # the table's change counters before the snapshot (_counters)
        self._order: dict[Any, int] = {}  # the key boundaries' places, in the server's order
        self.conn = connect(options)
        try:
            with errors_in_one_line(options):
                # counted before the snapshot is taken: a change these counters include, the snapshot sees (so not
                # with a snapshot the user exported before)
                counters = _counters(self.conn, table) if table.server_version >= 150000 and not options.snapshot \
                    else ""
                self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                if options.snapshot:
                    _import(self.conn, options.snapshot)
                else:
                    self.snapshot = self.conn.row("SELECT pg_export_snapshot()")[0]
                if table.server_version >= 130000:
                    xmin, xmax = self.conn.row(
                        "SELECT pg_snapshot_xmin(s)::text::int8, pg_snapshot_xmax(s)::text::int8 "
                        "FROM pg_current_snapshot() s")
                    self.instant = {"xmin": xmin, "xmax": xmax}
                    self.counters = counters
                    if since is not None and xmax - since >= XID_WINDOW:
                        raise OptionsError(
                            f"{table.label}: {xmax - since:,} transactions since the last run's snapshot, more than "
                            "a row's 32-bit transaction id tells apart: copy the table whole to a new output")
                self.guard = _guard(self.conn, table)
                # an incremental run that finds the counters the last run left has nothing to read, and hands on
                # the last run's instant (young enough to keep: a run does not hand it on for ever)
                self.changed = not (since is not None and counters and counters == self._last.get("changes")
                                    and int(self.instant["xmax"]) - since < XID_WINDOW // 2)
                if not self.changed:
                    self.instant = self._last
        except BaseException:
            self.close()
            raise

    def boundaries(self, by_blocks: bool) -> Iterator[tuple[Any, int]]:
        """The ranges' upper keys and estimated bytes: a key's values as the server prints them, or a block key."""
        target = self._options.split_size_mb * 1024 * 1024
        sizes = [self.conn.row("SELECT pg_table_size(%s::regclass), pg_relation_size(%s::regclass) / %s",
                               relation, relation, BLOCK) for relation in self._table.relations]
        if not by_blocks:
            size = sum(s[0] for s in sizes)
            count = max(1, math.ceil(size / target))
            bounds = self._key_bounds(count, sum(s[1] for s in sizes)) if count > 1 else []
            self._order = {bound: i for i, bound in enumerate(bounds)}
            yield from ((bound, size // (len(bounds) + 1)) for bound in bounds)
            return
        for r, (size, blocks) in enumerate(sizes):
            count = max(1, math.ceil(size / target))
            step = max(1, math.ceil(blocks / count))
            yield from (((r, block - 1, LAST_OFFSET), size // count) for block in range(step, blocks, step))
            if r < len(sizes) - 1:
                yield (r, END, 0), size // count

    def _key_bounds(self, count: int, blocks: int) -> list[tuple[str, ...]]:
        """``count - 1`` boundaries at the quantiles of a block sample of the key (fewer where they coincide)."""
        table = self._table
        percent = min(100.0, 100.0 * max(SAMPLE_BLOCKS, SAMPLE_PER_SPLIT * count) / max(blocks, 1))
        keys = ", ".join(f"{ident(c.name)}::text AS __k{i}" for i, c in enumerate(table.key))
        # qualified: an output column of the same name (the text) would be sorted as text
        order = ", ".join(f"{table.qualified}.{ident(c.name)}" for c in table.key)
        where = f" WHERE {self._options.where}" if self._options.where else ""
        sample = self.conn.query(f"SELECT {keys} FROM {table.qualified} TABLESAMPLE SYSTEM ({percent}) "
                                 f"REPEATABLE (0){where} ORDER BY {order}")
        if not sample.num_rows:
            return []

        def key(row: int) -> tuple[str, ...]:  # only the quantiles become Python (the sample: ~100,000 rows)
            return tuple(column[row].as_py() for column in sample.columns)

        first = key(0)
        bounds: list[tuple[str, ...]] = []
        for i in range(1, count):
            bound = key(sample.num_rows * i // count)
            if bound != (bounds[-1] if bounds else None) and bound != first:
                bounds.append(bound)
        return bounds

    def before(self, a: tuple[str, ...], b: tuple[str, ...]) -> bool:
        """Whether key ``a`` sorts before key ``b`` as the server sorts the key (its collations): by their places
        among the boundaries (the server sorted them), else asked (a resumed plan's key, at its start only)."""
        if a in self._order and b in self._order:
            return self._order[a] < self._order[b]
        return bool(self.conn.row(f"SELECT {key_row(self._table, a)} < {key_row(self._table, b)}")[0])

    def close(self) -> None:
        self.conn.close()  # ends the transaction: its snapshot can be imported no more


def key_row(table: Table, values: tuple[str, ...]) -> str:
    """A key's values (the server's text of each) as an SQL row of the key columns' types."""
    items = [f"{literal(v)}::{c.type_name}" for v, c in zip(values, table.key, strict=True)]
    return items[0] if len(items) == 1 else f"({', '.join(items)})"


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


def _import(conn: Any, snapshot: str) -> None:
    """Read in ``snapshot``, the user's (option ``snapshot``): one the server cannot import (never exported, or its
    transaction ended) is refused in one line, as a bad value of the option."""
    try:
        conn.execute(f"SET TRANSACTION SNAPSHOT '{_snapshot_id(snapshot)}'")
    except Exception as exc:
        if not snapshot_gone(exc):
            raise
        raise OptionsError(f"connector 'postgres': option 'snapshot': PostgreSQL cannot import {snapshot} (never "
                           "exported, or the transaction that exported it has ended): give the id "
                           "pg_export_snapshot() returned in a transaction you hold open") from None


def _snapshot_id(text: str) -> str:
    if not all(c.isalnum() or c == "-" for c in text):
        raise OptionsError(f"connector 'postgres': option 'snapshot': {text!r} is not a snapshot id "
                           "(pg_export_snapshot() returns one like 00000003-0000001B-1)")
    return text
