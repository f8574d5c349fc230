"""PostgresSource: a PostgreSQL table (or a bounded part of it) at one instant, by key or block ranges."""

from __future__ import annotations

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
    session_options,
)
from connectors.postgres._enumerator import PostgresEnumerator
from connectors.postgres._options import PostgresOptions, conninfo
from connectors.postgres._reader import PostgresSplitReader
from connectors.postgres._session import connect, errors_in_one_line, transient
from connectors.postgres._splits import POSITIONS, SPLITS, PostgresPosition, PostgresSplit
from serializers import SimpleVersionedSerializer
from splitsource import Changes, EnumeratorState, OptionsError, Predicate, Source, SplitEnumeratorContext

__all__ = ["PostgresSource"]


class PostgresSource(Source[PostgresSplit, PostgresPosition, Any, PostgresOptions]):
    """A PostgreSQL table read at one instant (``connector=postgres``).

    Options (``splitsource options --connector postgres``): ``table`` (required), the libpq connection (``dsn``,
    ``password``, ``sslmode``...; else libpq's environment and ``~/.pgpass``), ``columns``, ``where``,
    ``split_by``, ``split_size_mb``. Example::

        spark.read.format("splitsource").option("connector", "postgres").option("table", "public.events").load()
    """

    name = "postgres"
    options_class = PostgresOptions

    @functools.cached_property
    def table(self) -> Table:
        """The table as the catalog describes it: asked once per Source, or in a reader's process as the copy's
        planner described it (option ``described``: a process that only reads imports no psycopg and connects no
        second time, 0.2 s of CPU in each of them)."""
        o = self.options
        if o.described:
            return described(o.described, o.columns, o.text_columns, o.decimal)
        with connect(o) as conn, errors_in_one_line(o):
            return describe(conn, o.table, o.columns, o.text_columns, o.decimal)

    def schema(self) -> pa.Schema:
        return self.table.schema

    def create_enumerator(self, context: SplitEnumeratorContext) -> PostgresEnumerator:
        return PostgresEnumerator(self.options, self.table, context, since=self._since_xmin(), last=self.since)

    def restore_enumerator(self, context: SplitEnumeratorContext,
                           state: EnumeratorState[PostgresSplit, PostgresPosition]) -> PostgresEnumerator:
        return PostgresEnumerator(self.options, self.table, context, state.position, state.pending,
                                  self._since_xmin())

    def create_split_reader(self) -> PostgresSplitReader:
        return PostgresSplitReader(self.options, self.table, self._since_xmin())

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

    def split_serializer(self) -> SimpleVersionedSerializer[PostgresSplit]:
        return SPLITS

    def position_serializer(self) -> SimpleVersionedSerializer[PostgresPosition]:
        return POSITIONS

    def is_transient(self, error: BaseException) -> bool:
        if super().is_transient(error):
            return True
        if isinstance(error, PostgresConnectionError):  # connecting or the catalog, decided from the driver's error
            return error.transient
        return transient(error)  # a reader's ADBC error

    def identity(self) -> Mapping[str, Any]:
        o = self.options
        found: dict[str, Any] = {"connector": self.name, "table": self.table.label, "shape": self.table.shape}
        found.update({k: getattr(o, k) for k in ("columns", "where", "text_columns", "decimal") if getattr(o, k)})
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
