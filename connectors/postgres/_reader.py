"""Reading PostgreSQL splits page by page into Arrow, through the ADBC driver (``COPY ... (FORMAT binary)``
decoded in C), inside the run's snapshot; and the emitter.

A reader holds one connection in one REPEATABLE READ transaction that imports the run's snapshot (when the copy
exported one). A key range is read in pages ordered by the key, each resuming after the last key read; a block
range in pages of whole blocks. A lost connection is transient: the next fetch connects again and resumes the
split where its state says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from connectors.postgres._catalog import Table, ident, literal, session_options
from connectors.postgres._options import PostgresOptions, conninfo
from connectors.postgres._session import login_error, one_line
from connectors.postgres._splits import PostgresSplit, PostgresSplitState, narrowed
from splitsource import OptionsError, ReadEvent, RecordEmitter, RecordsBySplits, SplitQueue, SplitReader, SplitReadError

__all__ = ["PostgresEmitter", "PostgresSplitReader", "key_condition"]

Raw = tuple[pa.RecordBatch, PostgresSplit]  # a page, and what is left of its split after it
BLOCK = 8192


class SnapshotGoneError(SplitReadError):
    """The run's snapshot can no longer be imported (the server restarted, or the planner's session ended)."""


class PostgresSplitReader(SplitReader[PostgresSplit, Raw]):
    def __init__(self, options: PostgresOptions, table: Table) -> None:
        self._options, self._table = options, table
        self._queue: SplitQueue[PostgresSplit, PostgresSplit] = SplitQueue(lambda split: split)
        self._conn: Any = None
        self._cursor_obj: Any = None
        self._events: list[ReadEvent] = []

    def add_splits(self, splits: Sequence[PostgresSplit]) -> None:
        self._queue.add(splits)

    def _cursor(self, split: PostgresSplit) -> Any:
        if self._conn is None:
            import adbc_driver_postgresql.dbapi as adbc

            try:
                self._conn = adbc.connect(conninfo(self._options) + f" options='{session_options()}'",
                                          autocommit=True)
            except Exception as exc:  # the driver's own error classes
                raise login_error(exc, self._options) from None
            cursor = self._conn.cursor()
            cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if self._options.snapshot:
                try:
                    cursor.execute(f"SET TRANSACTION SNAPSHOT {literal(self._options.snapshot)}")
                except Exception as exc:
                    self.close()
                    if split.by_blocks:
                        raise SnapshotGoneError(
                            f"the copy's snapshot {self._options.snapshot} is gone ({one_line(exc)}): block-range "
                            "splits cannot go on at another instant; run the copy again (it resumes, and refuses "
                            "if the table changed)", split_ids=(split.split_id,)) from None
                    self._reconnect_without_snapshot(split, exc)
                    return self._cursor(split)
            self._cursor_obj = cursor
        return self._cursor_obj

    def _reconnect_without_snapshot(self, split: PostgresSplit, exc: BaseException) -> None:
        """Key ranges stay exact at a new instant: every key once, the rest of the run as of now."""
        self._options = dataclasses.replace(self._options, snapshot="")
        self._events.append(ReadEvent("snapshot_lost", split.split_id,
                                      f"the run's snapshot is gone ({one_line(exc)}): this reader goes on at a "
                                      "new one"))

    def fetch(self) -> RecordsBySplits[Raw]:
        split = self._queue.head
        if split is None:
            return RecordsBySplits()
        at = self._queue.position
        assert at is not None
        if at.done:
            self._queue.pop()
            return RecordsBySplits.finished_only(split.split_id)
        try:
            page, after = self._page(at)
        except (OptionsError, SplitReadError):
            raise
        except Exception:
            self.close()  # the next fetch connects again and resumes from the split state
            raise
        events, self._events = tuple(self._events), []
        if after.done:
            self._queue.pop()
            return RecordsBySplits([(split.split_id, (page, after))], frozenset({split.split_id}), events)
        self._queue.position = after
        return RecordsBySplits([(split.split_id, (page, after))], events=events)

    def _page(self, split: PostgresSplit) -> tuple[pa.RecordBatch, PostgresSplit]:
        table, options = self._table, self._options
        columns = [c.select for c in table.columns]
        hidden: list[str] = []
        beyond = table.beyond_arrow_check()
        if beyond is not None:
            hidden.append(f"{beyond} AS __beyond")
        conditions = [f"({options.where})"] if options.where else []
        if split.by_blocks:
            cursor = self._cursor(split)
            end = split.first_block + max(1, int(options.page_mb * 1024 * 1024) // BLOCK)
            if split.end_block >= 0:
                end = min(end, split.end_block)
            conditions += [f"ctid >= '({split.first_block},0)'::tid", f"ctid < '({end},0)'::tid"]
            query = f"SELECT {', '.join(columns + hidden)} FROM {split.relation} WHERE {' AND '.join(conditions)}"
            result = _run(cursor, query)
            if split.end_block >= 0:
                done = end >= split.end_block
            else:
                cursor.execute(f"SELECT pg_relation_size({literal(split.relation)}::regclass) / {BLOCK}")
                done = end >= cursor.fetchone()[0]
            after = narrowed(split, done=done, next_block=end)
        else:
            cursor = self._cursor(split)
            limit = max(1, min(options.page_rows, int(options.page_mb * 1024 * 1024) // max(split.row_bytes, 1)))
            keys = [f"{ident(c.name)}::text AS __k{i}" for i, c in enumerate(table.key)]
            conditions += key_condition(table, split)
            # qualified: a column read as text has an output column of its name, which would sort as text
            order = ", ".join(f"{split.relation}.{ident(c.name)}" for c in table.key)
            where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
            query = (f"SELECT {', '.join(columns + keys + hidden)} FROM {split.relation}{where} "
                     f"ORDER BY {order} LIMIT {limit}")
            result = _run(cursor, query)
            if result.num_rows < limit:
                after = narrowed(split, done=True)
            else:
                last = tuple(str(result.column(f"__k{i}")[-1].as_py()) for i in range(len(table.key)))
                after = narrowed(split, after_key=last)
        if beyond is not None and result.num_rows:
            _refuse_beyond_arrow(table, result)
        arrays = [result.column(i).combine_chunks() if result.num_rows else pa.array([], c.arrow)
                  for i, c in enumerate(table.columns)]
        return pa.RecordBatch.from_arrays(arrays, schema=table.schema), after

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - a connection already lost closes with an error
                pass
            self._conn = None


def _refuse_beyond_arrow(table: Table, page: pa.Table) -> None:
    """Fail, in one line naming the column, the row's key and the option to use, when ``page`` holds a value its
    column's Arrow type cannot hold (its hidden ``__beyond`` column is the column's 1-based index, else 0)."""
    import pyarrow.compute as pc

    first = pc.max(page.column("__beyond")).as_py()
    if not first:
        return
    column = table.columns[first - 1]
    row = ""
    if table.key and "__k0" in page.column_names:  # a key range's page carries its key as text
        at = pc.index(page.column("__beyond"), first).as_py()
        row = " (row " + ", ".join(f"{c.name}={page.column(f'__k{i}')[at].as_py()}"
                                   for i, c in enumerate(table.key)) + ")"
    raise OptionsError(f"connector 'postgres': column {column.name} of {table.label} holds {column.beyond_arrow[1]}"
                       f"{row}, which Arrow's {column.arrow} cannot hold; add -o text_columns={column.name} to read "
                       "it as the server's text")


def _run(cursor: Any, query: str) -> pa.Table:
    cursor.execute(query)
    return cursor.fetch_arrow_table()


def key_condition(table: Table, split: PostgresSplit) -> list[str]:
    """The SQL conditions that keep a key range's rows: row comparisons for a composite key."""
    def row(values: tuple[str, ...]) -> str:
        items = [f"{literal(v)}::{c.type_name}" for v, c in zip(values, table.key, strict=True)]
        return items[0] if len(items) == 1 else f"({', '.join(items)})"

    names = [f"{split.relation}.{ident(c.name)}" for c in table.key]
    key = names[0] if len(names) == 1 else f"({', '.join(names)})"
    out = []
    if split.lo is not None:
        out.append(f"{key} {'>=' if split.lo_inclusive else '>'} {row(split.lo)}")
    if split.hi is not None:
        out.append(f"{key} < {row(split.hi)}")
    return out


class PostgresEmitter(RecordEmitter[Raw, PostgresSplit]):
    def emit(self, raw: Raw, state: PostgresSplitState) -> pa.RecordBatch:  # type: ignore[override]
        page, after = raw
        state.remaining = after
        return page
