"""PostgresSource: a PostgreSQL table (or a bounded part of it) at one instant, in key or block ranges, on the
short path (:class:`~splitsource.KeyRangeSource`): its hooks hold the run's snapshot (``_plan``), and its pages are
read and decoded in ``_reader``."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from connectors.postgres._catalog import (
    Column,
    PostgresConnectionError,
    Table,
    describe,
    described,
    ident,
    literal,
    server_words,
    session_options,
)
from connectors.postgres._options import PostgresOptions, conninfo
from connectors.postgres._plan import BLOCK, Plan
from connectors.postgres._reader import ROWS_PER_BLOCK, Changed, count_changed, page, read_keys, session
from connectors.postgres._session import Connection, connect, driver_error, errors_in_one_line, transient
from splitsource import Changes, KeyRange, KeyRangeSource, OptionsError, Predicate

__all__ = ["PostgresSource"]

# the most pages an incremental run's reader reads changed rows in by their places: each page fetches every place
# again (a TID scan of the list, ordered by key), so more changed rows than this many pages hold walk key ranges
PLACES_PAGES = 8


class PostgresSource(KeyRangeSource[PostgresOptions]):
    """A PostgreSQL table read at one instant (``connector=postgres``).

    Options (``splitsource options --connector postgres``): ``table`` (required), the libpq connection (``dsn``,
    ``password``, ``sslmode``...; else libpq's environment and ``~/.pgpass``), ``columns``, ``where``,
    ``split_by``, ``split_size_mb``. Example::

        spark.read.format("splitsource").option("connector", "postgres").option("table", "public.events").load()
    """

    name = "postgres"
    options_class = PostgresOptions
    _plan: Plan | None = None
    _changes: Changed | None = None  # the plan's scan for the changed rows, once made
    _keys_read = False  # keys() was asked for: this run finds the deletes

    @functools.cached_property
    def table(self) -> Table:
        """The table as the catalog describes it: asked once per Source, or in a reader's process as the copy's
        planner described it (option ``described``: a process that only reads imports no psycopg and connects no
        second time, 0.2 s of CPU in each of them)."""
        o = self.options
        if o.described:
            return described(o.described, o.columns, o.text_columns, o.decimal)
        with connect(o) as conn, errors_in_one_line(o):
            table = describe(conn, o.table, o.columns, o.text_columns, o.decimal)
            if o.where:
                _check_where(conn, table, o.where)
            return table

    @functools.cached_property
    def by_blocks(self) -> bool:
        """Whether the table is read in block ranges (``split_by``; ``auto``: when it has no usable key)."""
        return self.options.split_by == "blocks" or (self.options.split_by == "auto" and not self.table.key)

    def schema(self) -> pa.Schema:
        return self.table.schema

    def start(self) -> None:
        table, split_by = self.table, self.options.split_by
        if split_by == "key" and not table.key:
            raise OptionsError(f"connector 'postgres': option 'split_by': key, but {table.label} has no primary key "
                               "or unique index on not-null columns of an orderable type; use split_by=blocks")
        if self.by_blocks and table.server_version < 140000:
            raise OptionsError(f"connector 'postgres': {table.label} has no usable key, and block ranges need "
                               "PostgreSQL 14 or later (TID range scans)")
        self._plan, self._changes = Plan(self.options, table, self._since_xmin(), self.since), None

    def stop(self) -> None:
        """Ends the plan's session (its snapshot can be imported no more); what it found stays (the instant)."""
        if self._plan is not None:
            self._plan.close()

    def _started(self) -> Plan:
        if self._plan is None:
            raise RuntimeError("PostgresSource: start() first")
        return self._plan

    def reader_options(self) -> dict[str, str]:
        """The run's snapshot, the table as described and how it is split, for every reader of this run; an
        incremental run's changed rows, or their places, where its plan has them (:meth:`_handed`)."""
        snapshot = self._started().snapshot
        return {"described": self.table.catalog, "split_by": "blocks" if self.by_blocks else "key"} | (
            {"snapshot": snapshot} if snapshot else {}) | self._handed()

    def instant(self) -> dict[str, Any]:
        """The run's snapshot: the oldest transaction it saw running, and the first it did not see (64-bit); and
        the table's change counters, where the run reads all that changed, deletes included (a full copy, or a run
        that read the keys), so that a next run finding the same counters has nothing to read."""
        plan = self._started()
        if plan.counters and plan.changed and (self.since is None or self._keys_read):
            return plan.instant | {"changes": plan.counters}
        return plan.instant

    def changed(self) -> bool:
        return self._started().changed

    def keys(self) -> Iterator[pa.RecordBatch] | None:
        """The table's keys in the run's snapshot, as the copy's readers type them (read as a table of the key
        columns alone), a scan of each relation."""
        table, plan = self.table, self._started()
        if not table.key or any(k not in table.columns for k in table.key) or not plan.changed:
            return None
        self._keys_read = True
        return read_keys(self._in_plan(), dataclasses.replace(table, columns=table.key))

    def changed_keys(self) -> tuple[int, Iterator[pa.RecordBatch]] | None:
        """The table's rows counted, and the keys of the row versions the last run's snapshot could not see, in the
        run's snapshot: one scan with nothing sent but the changed keys, where :meth:`keys` sends every key; None
        where it cannot count (a ``where``: :func:`count_changed`)."""
        changes = self._changed()
        return None if changes is None or changes.count is None else (changes.count, iter(changes.keys))

    def _changed(self) -> Changed | None:
        """An incremental run's scan for the changed rows (:func:`count_changed`), made once per plan: for the
        deletes (:meth:`changed_keys`) and for the readers (:meth:`_handed`)."""
        since = self._since_xmin()
        if since is None or not self.table.key:
            return None
        if self._changes is None:  # rows or places, for key ranges alone: block ranges read by place already
            page, most = self.page_limit(KeyRange(0, None, None)), 0 if self.by_blocks else self.options.tid_rows
            self._changes = count_changed(self._started().conn, self._in_plan(), self.table, since,
                                          min(most, page), min(most, PLACES_PAGES * page))
        return self._changes

    def _handed(self) -> dict[str, str]:
        """What an incremental run's readers read instead of scanning key ranges, up to ``tid_rows`` changed rows:
        the rows, read by the plan, where they fit one page (option ``rows``); else their places (option ``tids``),
        in a table of one relation, up to ``PLACES_PAGES`` pages of them; else nothing."""
        changes = self._changed() if self._started().changed else None
        if changes is None:
            return {}
        return {"rows": changes.rows} if changes.rows else {"tids": changes.tids} if changes.tids else {}

    def _in_plan(self) -> PostgresOptions:
        """The options of a connection that reads in the run's snapshot."""
        return dataclasses.replace(self.options, snapshot=self._started().snapshot or self.options.snapshot)

    def boundaries(self) -> Iterator[tuple[Any, int]]:
        """One range where the plan hands its readers the changed rows or their places (a few rows, which one
        reader reads sooner than two processes start); else ranges of about ``split_size_mb``."""
        return iter(()) if self._handed() else self._started().boundaries(self.by_blocks)

    def before(self, a: Any, b: Any) -> bool:
        """Block keys in Python's order; a key's text in the server's order of the key (its collations)."""
        return bool(a < b) if self.by_blocks else self._started().before(a, b)

    def plan_guard(self) -> str:
        """Block ranges resume only on an unchanged table; key ranges resume by key."""
        return f"blocks {self._started().guard}" if self.by_blocks else ""

    def page_limit(self, split: KeyRange) -> int:
        """``page_rows``, shrunk to ``page_mb`` of the table's rows; a block range's pages are ``page_mb`` of
        blocks, with as many rows as they hold."""
        blocks = max(1, int(self.options.page_mb * 1024 * 1024) // BLOCK)
        if self.by_blocks:
            return blocks * ROWS_PER_BLOCK
        return max(1, min(self.options.page_rows, blocks * BLOCK // self.table.row_bytes))

    def connect(self) -> Connection | None:
        """A session at the run's snapshot; one found gone is not asked for again (key ranges go on at a new
        instant, and ``snapshot_lost`` is reported). None where the plan handed the rows (option ``rows``)."""
        if self.options.rows and self.options.snapshot:
            return None
        connection, self.options = session(self.options, self.table, self.by_blocks,
                                           lambda detail: self.report("snapshot_lost", detail))
        return connection

    def interrupt(self, connection: Connection | None) -> None:
        """libpq's cancel of the running page's query (sent until the query ends: the server ignores one that
        reaches it before the query; :class:`~splitsource.WakeUp`): the page is asked again in a new session."""
        if connection is not None:
            connection.cancel()

    def read(self, connection: Connection | None, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        return page(connection, self.options, self.table, split, limit, self._since_xmin(), self.by_blocks)

    def incremental(self) -> Changes:
        """Upserts: an incremental run reads every row version the last run's snapshot could not see, by the
        transaction ids on the rows (docs/incremental.md); a table needs a key, whose newest version wins."""
        if not self.table.key:
            raise OptionsError(f"connector 'postgres': --incremental needs a key to apply a changed row by: "
                               f"{self.table.label} has no primary key or unique index on not-null columns")
        if self.table.server_version < 130000:
            raise OptionsError("connector 'postgres': --incremental needs PostgreSQL 13 or later "
                               "(pg_current_snapshot)")
        return Changes.UPSERTS

    def _since_xmin(self) -> int | None:
        """The oldest transaction the last run's snapshot still saw running (64-bit), or None: read everything."""
        if self.since is None:
            return None
        xmin = self.since.get("xmin")
        if not isinstance(xmin, int) or xmin < 3:
            raise OptionsError(f"option 'since': {self.since} is not a PostgreSQL instant (xmin=N xmax=M)")
        return xmin

    def is_transient(self, error: BaseException) -> bool:
        if super().is_transient(error):
            return True
        if isinstance(error, PostgresConnectionError):  # connecting or the catalog, decided from the driver's error
            return error.transient
        return transient(error)  # a reader's ADBC error

    def identity(self) -> Mapping[str, Any]:
        o = self.options
        found: dict[str, Any] = {"connector": self.name, "table": self.table.label, "shape": self.table.shape}
        found.update({k: ",".join(v) if isinstance(v, tuple) else v
                      for k in ("columns", "where", "text_columns", "decimal") if (v := getattr(o, k))})
        return found

    def origin(self) -> Mapping[str, Any]:
        system, database = self.table.origin  # asked with the catalog, in the same session
        return {"system_identifier": system, "database": database}

    def key_columns(self) -> Sequence[str]:
        return [c.name for c in self.table.key]

    def push_predicates(self, predicates: Sequence[Predicate]) -> tuple[Mapping[str, str], Sequence[int]]:
        columns = {c.name: c for c in self.table.columns}
        conditions, used = [], []
        for i, p in enumerate(predicates):
            sql = _condition(columns.get(p.column), p)
            if sql is not None:
                conditions.append(sql)
                used.append(i)
        if not conditions:
            return {}, ()
        where = " AND ".join(([f"({self.options.where})"] if self.options.where else []) + conditions)
        return {"where": where}, used

    def reference_rows(self, part: int = 0, parts: int = 1) -> Iterator[tuple[Any, ...]]:
        """The rows through psycopg with plain values computed by the server (days, microseconds, text), a path
        apart from the readers' ADBC decoding; part ``part`` of ``parts`` is a run of blocks of each relation."""
        table = self.table
        select = ", ".join(_plain(c) for c in table.columns)
        with errors_in_one_line(self.options), _psycopg(self.options) as conn:
            for relation in table.relations:
                blocks = conn.execute("SELECT pg_relation_size(%s::regclass) / 8192", (relation,)).fetchone()[0]
                lo, hi = blocks * part // parts, blocks * (part + 1) // parts
                conditions = [f"ctid >= '({lo},0)'::tid"] + ([f"ctid < '({hi},0)'::tid"] if part < parts - 1 else [])
                if self.options.where:
                    conditions.append(f"({self.options.where})")
                with conn.cursor(name=f"splitsource_verify_{part}") as cursor:
                    cursor.itersize = 10_000
                    conn.autocommit = False
                    cursor.execute(f"SELECT {select} FROM {relation} WHERE {' AND '.join(conditions)}")
                    for row in cursor:
                        yield tuple(row)
                    conn.rollback()
                    conn.autocommit = True

    def reference_label(self, part: int, parts: int) -> str:
        return f"blocks part {part + 1} of {parts}"


def _check_where(conn: Connection, table: Table, where: str) -> None:
    """Refuse, before anything is read or written, a ``where`` the server cannot plan on the table (a syntax error,
    an unknown column, function or operator, a literal of the wrong type), in one line with the server's words:
    the server plans the condition and tests it on no row. An error it meets only on a row (a division by zero)
    fails the read that meets it."""
    try:
        # prepared, as every query of the driver is, so one statement alone; LIMIT 0 reads no row
        conn.query(f"SELECT 1 FROM {table.qualified} WHERE ({where}) LIMIT 0")
    except Exception as exc:
        if not driver_error(exc) or transient(exc):
            raise  # a lost session, not the condition: errors_in_one_line tells what happened
        raise OptionsError(f"option 'where': PostgreSQL refuses {where!r} on {table.label}: {server_words(exc)}"
                           ) from None


def _psycopg(options: PostgresOptions) -> Any:
    """A psycopg connection (autocommit) with the connector's session settings: ``verify``'s reference rows come
    through it, a decoding apart from the readers' (ADBC's)."""
    import psycopg

    return psycopg.connect(conninfo(options, options=session_options()), autocommit=True)


def _plain(column: Column, item: str = "") -> str:
    """The column as the plain Python value verify compares with (see ``Source.reference_rows``); ``item``: the
    SQL of one item of an array column, as that item's plain value."""
    name = item or ident(column.name)
    if column.listed and not item:  # the items' plain values, in order, in an array
        return (f"CASE WHEN {name} IS NOT NULL THEN ARRAY(SELECT {_plain(column, 'u.x')} FROM unnest({name}) "
                "WITH ORDINALITY AS u(x, o) ORDER BY u.o) END")
    if column.uuid_bytes:
        return f"{name}::text"
    if column.decimal:
        return f"{name}::numeric"  # psycopg's Decimal
    if column.value_type == pa.string():
        return name if item else column.select
    if column.base == "date":
        return f"({name} - DATE '1970-01-01')"
    if column.base in ("timestamp", "timestamptz"):
        # the day and the time of day apart: extract(epoch) of a timestamp loses its last digits near year 294247
        return (f"(({name})::date - DATE '1970-01-01')::int8 * 86400000000 "
                f"+ (extract(epoch FROM ({name})::time) * 1000000)::int8")
    if column.base == "time":
        return f"(extract(epoch FROM {name}) * 1000000)::int8"
    return name if item else column.select


def _condition(column: Column | None, p: Predicate) -> str | None:
    """``p`` as SQL on ``column`` with Spark's meaning, or None when it cannot be pushed exactly."""
    if column is None or column.listed or column.arrow == pa.string() and column.base not in ("text", "varchar",
                                                                                             "bpchar", "name"):
        return None  # read as text: the server's comparison of its own type differs from Spark's of strings
    if column.arrow in (pa.binary(), pa.time64("us")) or column.base in ("bpchar",):
        return None
    values = p.value if p.op == "in" else (p.value,)
    if any(v is None for v in values):
        return None
    texts = []
    for v in values:
        if isinstance(v, bool):
            texts.append("true" if v else "false")
        elif hasattr(v, "isoformat"):
            texts.append(v.isoformat())
        else:
            texts.append(str(v))
    # strings compare by UTF-8 bytes in Spark: the C collation does the same
    name = ident(column.name) + (' COLLATE "C"' if column.arrow == pa.string() else "")
    typed = [f"{literal(t)}::{column.type_name}" for t in texts]
    if p.op == "in":
        return f"{name} IN ({', '.join(typed)})"
    if p.op in ("=", "<", "<=", ">", ">="):
        return f"{name} {p.op} {typed[0]}"
    return None
