"""Reading PostgreSQL splits page by page into Arrow, through the ADBC driver (``COPY ... (FORMAT binary)``
decoded in C), inside the run's snapshot; and the emitter.

A reader holds one connection in one REPEATABLE READ transaction that imports the run's snapshot (when the copy
exported one). A key range is read in pages ordered by the key, each resuming after the last key read; a block
range in pages of whole blocks. A lost connection is transient: the next fetch connects again and resumes the
split where its state says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from connectors.postgres._catalog import Column, Table, ident, literal
from connectors.postgres._options import PostgresOptions
from connectors.postgres._session import Connection, connect, one_line
from connectors.postgres._splits import PostgresSplit, narrowed
from splitsource import (
    OptionsError,
    ReadEvent,
    RecordsBySplits,
    SplitQueue,
    SplitReader,
    SplitReadError,
    ValueRangeError,
    WakeUp,
    Woken,
)

__all__ = ["PostgresSplitReader", "changed_since", "key_condition", "read_keys", "snapshot_gone"]

Raw = tuple[pa.RecordBatch, PostgresSplit]  # a page, and what is left of its split after it
BLOCK = 8192


class SnapshotGoneError(SplitReadError):
    """The run's snapshot can no longer be imported (the server restarted, or the planner's session ended)."""


# what the server answers SET TRANSACTION SNAPSHOT when the snapshot cannot be imported any more: its exporting
# transaction ended, so its file is gone ("invalid snapshot identifier", 22023), or its process is no longer running
# ("could not import the requested snapshot", 55000)
_SNAPSHOT_GONE = {"22023": "invalid snapshot identifier", "55000": "could not import the requested snapshot"}


def snapshot_gone(exc: BaseException) -> bool:
    """Whether ``exc``, raised by ``SET TRANSACTION SNAPSHOT``, is the server saying the snapshot is gone (and not a
    lost connection, a terminated backend or any other failure)."""
    message = str(exc)
    state = getattr(exc, "sqlstate", None)
    if state is not None:
        return state in _SNAPSHOT_GONE and _SNAPSHOT_GONE[state] in message
    return any(words in message for words in _SNAPSHOT_GONE.values())


class PostgresSplitReader(SplitReader[PostgresSplit, Raw]):
    """Reads its splits' rows page by page; ``since`` (an incremental run's): only the row versions the last run's
    snapshot, whose xmin that is, could not see (:func:`changed_since`)."""

    def __init__(self, options: PostgresOptions, table: Table, since: int | None = None) -> None:
        self._options, self._table, self._since = options, table, since
        self._queue: SplitQueue[PostgresSplit, PostgresSplit] = SplitQueue(lambda split: split)
        self._connection: Connection | None = None
        self._events: list[ReadEvent] = []
        self._wake = WakeUp(self._cancel)

    def add_splits(self, splits: Sequence[PostgresSplit]) -> None:
        self._queue.add(splits)

    def _connection_for(self, split: PostgresSplit) -> Connection:
        if self._connection is None:
            connection = connect(self._options, self._table.lc_monetary)
            connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if self._options.snapshot:
                try:
                    connection.execute(f"SET TRANSACTION SNAPSHOT {literal(self._options.snapshot)}")
                except Exception as exc:
                    connection.close()
                    if not snapshot_gone(exc):
                        raise  # a lost connection, a terminated backend: transient, the next fetch tries again
                    if split.by_blocks:
                        raise SnapshotGoneError(
                            f"the copy's snapshot {self._options.snapshot} is gone ({one_line(exc)}): block-range "
                            "splits cannot go on at another instant; run the copy again (it resumes, and refuses "
                            "if the table changed)", split_ids=(split.split_id,)) from None
                    self._reconnect_without_snapshot(split, exc)
                    return self._connection_for(split)
            self._connection = connection
        return self._connection

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
        except Woken:
            self._wake.woken()
            return RecordsBySplits()
        except Exception:
            self.close()  # the next fetch connects again and resumes from the split state
            if self._wake.woken():  # cancelled by wake_up: nothing read, the page is asked again
                return RecordsBySplits()
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
        shapes = [f"{c.shape_check} AS {_shape_column(i)}" for i, c in enumerate(table.columns) if c.listed]
        conditions = [f"({options.where})"] if options.where else []
        if self._since is not None:
            conditions.append(changed_since(split.relation, self._since))
        connection = self._connection_for(split)
        if split.by_blocks:
            end = split.first_block + max(1, int(options.page_mb * 1024 * 1024) // BLOCK)
            if split.end_block >= 0:
                end = min(end, split.end_block)
            conditions += [f"ctid >= '({split.first_block},0)'::tid", f"ctid < '({end},0)'::tid"]
            where = " AND ".join(conditions)
            page = self._query(connection, f"SELECT {', '.join(columns + shapes)} FROM {split.relation} WHERE {where}")
            if split.end_block >= 0:
                done = end >= split.end_block
            else:
                blocks = self._query(connection,
                                     f"SELECT pg_relation_size({literal(split.relation)}::regclass) / {BLOCK}")
                done = end >= blocks.column(0)[0].as_py()
            after = narrowed(split, done=done, next_block=end)
        else:
            limit = max(1, min(options.page_rows, int(options.page_mb * 1024 * 1024) // max(split.row_bytes, 1)))
            keys = [f"{ident(c.name)}::text AS {name}" for c, name in zip(table.key, table.key_names, strict=True)
                    if name.startswith("__k")]
            conditions += key_condition(table, split)
            # qualified: a column read as text has an output column of its name, which would sort as text
            order = ", ".join(f"{split.relation}.{ident(c.name)}" for c in table.key)
            where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
            page = self._query(connection, f"SELECT {', '.join(columns + keys + shapes)} FROM {split.relation}{where} "
                                           f"ORDER BY {order} LIMIT {limit}")
            if page.num_rows < limit:
                after = narrowed(split, done=True)
            else:
                after = narrowed(split, after_key=_key_at(table, page, page.num_rows - 1))
        _refuse_shapes(table, page)
        arrays = _arrays(table, page)
        _refuse_beyond_arrow(table, arrays, page)
        return pa.RecordBatch.from_arrays(arrays, schema=table.schema), after

    def _query(self, connection: Connection, sql: str) -> pa.RecordBatch:
        with self._wake.call():
            return connection.query(sql)

    def wake_up(self) -> None:
        """Cut the running page's query short (libpq's cancel, through the driver, sent until the query ends: the
        server ignores one that reaches it before the query; :class:`~splitsource.WakeUp`): the fetch returns
        nothing, and the next one asks for the page again in a new session, which imports the run's snapshot."""
        self._wake.wake_up()

    def _cancel(self) -> None:
        if self._connection is not None:
            self._connection.cancel()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def read_keys(options: PostgresOptions, table: Table) -> Iterator[pa.RecordBatch]:
    """Every row of ``table`` (a table of its key columns alone), relation by relation in one query each, unordered
    (a scan, not a walk of the index), inside the run's snapshot when ``options`` has one."""
    connection = connect(options, table.lc_monetary)
    try:
        connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        if options.snapshot:
            connection.execute(f"SET TRANSACTION SNAPSHOT {literal(options.snapshot)}")
        where = f" WHERE {options.where}" if options.where else ""
        for relation in table.relations:
            page = connection.query(f"SELECT {', '.join(c.select for c in table.columns)} FROM {relation}{where}")
            yield pa.RecordBatch.from_arrays(_arrays(table, page), schema=table.schema)
    finally:
        connection.close()


def _shape_column(index: int) -> str:
    """The page column of the shape check of the array column at ``index`` (:attr:`Column.shape_check`)."""
    return f"__a{index}"


def _refuse_shapes(table: Table, page: pa.RecordBatch) -> None:
    """Fail, in one line naming the column, the row's key and the option to use, when an array column holds an
    array Arrow's list would not hold as it is (its shape check is true)."""
    for i, column in enumerate(table.columns):
        check = page.column(_shape_column(i)) if column.listed else None
        if check is not None and check.true_count:
            row = check.to_pylist().index(True)
            raise ValueRangeError(f"connector 'postgres': column {column.name} of {table.label} holds an array of "
                                  f"more than one dimension, or whose first index is not 1{_row_key(table, page, row)},"
                                  f" which Arrow's {column.arrow} cannot hold as it is; add -o text_columns="
                                  f"{column.name} to read it as the server's text", row)


def _arrays(table: Table, page: pa.RecordBatch) -> list[pa.Array]:
    """The page's columns as the table's Arrow types (a uuid's 16 bytes formatted as its text, a numeric's text
    parsed into its decimal; the same for an array's items)."""
    return [_list_of(table, c, page, page.column(i)) if c.listed else _values(table, c, page, page.column(i))
            for i, c in enumerate(table.columns)]


def _same_row(index: int) -> int:
    """The page row of a scalar column's value ``index``: itself (an array's items: :func:`_item_rows`)."""
    return index


def _values(table: Table, column: Column, page: pa.RecordBatch, values: pa.Array,
            rows: Callable[[int], int] = _same_row) -> pa.Array:
    """``values`` (a column's, or an array column's items, the ``rows(i)``-th page row holding item ``i``) as the
    column's Arrow type of one value."""
    if column.uuid_bytes:
        return _uuid_text(values)
    if column.decimal:
        return _decimals(table, column, page, values, rows)
    return values


def _list_of(table: Table, column: Column, page: pa.RecordBatch, lists: pa.ListArray) -> pa.Array:
    """An array column's lists with their items as the column's Arrow type (the driver's list keeps its offsets
    and nulls; only its items are converted)."""
    items = _values(table, column, page, lists.values, _item_rows(lists))
    return pa.Array.from_buffers(column.arrow, len(lists), lists.buffers()[:2], lists.null_count, lists.offset,
                                 [items])


def _item_rows(lists: pa.ListArray) -> Callable[[int], int]:
    """Which of the lists holds item ``i`` of their ``values`` (for a message's row key)."""
    offsets = np.frombuffer(lists.buffers()[1], dtype=np.int32, count=lists.offset + len(lists) + 1)
    return lambda item: int(np.searchsorted(offsets, item, side="right")) - 1 - lists.offset


def _decimals(table: Table, column: Column, page: pa.RecordBatch, texts: pa.Array,
              rows: Callable[[int], int]) -> pa.Array:
    """A numeric's text as its Arrow decimal, exactly: a value the decimal cannot hold (NaN, infinity, more digits
    than its precision or scale) is refused in one line naming the column, the value and its row's key, never
    rounded (Arrow's cast from text refuses to drop a digit)."""
    decimal = column.value_type
    try:
        return texts.cast(decimal)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        failure = exc
    for item, text in enumerate(texts.to_pylist()):
        try:
            pa.array([text], pa.string()).cast(decimal)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ValueRangeError(f"connector 'postgres': column {column.name} of {table.label} holds {text}"
                                  f"{_row_key(table, page, rows(item))}, "
                                  f"which Arrow's {decimal} cannot hold exactly; add -o text_columns="
                                  f"{column.name} to read it as the server's text", rows(item)) from None
    raise ValueRangeError(f"connector 'postgres': column {column.name} of {table.label}: {failure}")


_HEX = b"0123456789abcdef"
# each byte's two hex digits, as one uint16 in memory order: a uuid's 16 bytes take 16 lookups, not 32 scatters
_HEX_PAIRS = np.frombuffer(bytes(d for i in range(256) for d in (_HEX[i >> 4], _HEX[i & 15])), dtype=np.uint16)
_UUID_GROUPS = ((0, 8), (9, 13), (14, 18), (19, 23), (24, 36))  # where a uuid's 32 hex digits go, in 5 groups


def _uuid_text(array: pa.Array) -> pa.Array:
    """16-byte uuids (``fixed_size_binary(16)``, or the driver's extension type on it) as PostgreSQL prints them,
    ``6ba7b810-9dad-11d1-80b4-00c04fd430c8``, with numpy instead of a Python object per value."""
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if not len(array):
        return pa.array([], pa.string())
    total = array.offset + len(array)
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8, count=16 * total).reshape(total, 16)
    digits = np.take(_HEX_PAIRS, raw).view(np.uint8)
    text = np.full((total, 36), ord("-"), dtype=np.uint8)
    at = 0
    for start, end in _UUID_GROUPS:
        text[:, start:end] = digits[:, at:at + end - start]
        at += end - start
    offsets = np.arange(0, 36 * (total + 1), 36, dtype=np.int32)
    return pa.StringArray.from_buffers(len(array), pa.py_buffer(offsets), pa.py_buffer(text), array.buffers()[0],
                                       array.null_count, array.offset)


def _key_at(table: Table, page: pa.RecordBatch, row: int) -> tuple[str, ...]:
    """The text of the key of the page's ``row`` (from the columns :attr:`Table.key_names` names; a uuid's value is
    a ``uuid.UUID``, whose ``str`` is the server's text)."""
    return tuple(str(page.column(name)[row].as_py()) for name in table.key_names)


def _refuse_beyond_arrow(table: Table, arrays: list[pa.Array], page: pa.RecordBatch) -> None:
    """Fail, in one line naming the column, the row's key (where the page has it) and the option to use, when a
    column holds a value its Arrow type cannot hold (see :attr:`Column.beyond_arrow`). By numpy on the values'
    buffer: pyarrow.compute would cost a reader's process 0.07 s to import."""
    for column, array in zip(table.columns, arrays, strict=True):
        beyond = column.beyond_arrow
        if beyond is None:
            continue
        array, rows = (array.values, _item_rows(array)) if column.listed else (array, _same_row)
        if not len(array):
            continue
        (low, high), what = beyond
        start, end = array.offset, array.offset + len(array)
        width = np.int64 if array.type.bit_width == 64 else np.int32
        values = np.frombuffer(array.buffers()[1], dtype=width, count=end)[start:].astype(np.int64, copy=False)
        hit = values < low if low is not None else values >= (high or 0)
        if array.null_count:
            hit &= np.unpackbits(np.frombuffer(array.buffers()[0], dtype=np.uint8), bitorder="little",
                                 count=end)[start:].astype(bool)
        if not hit.any():
            continue
        row = _row_key(table, page, rows(int(np.argmax(hit))))
        raise ValueRangeError(f"connector 'postgres': column {column.name} of {table.label} holds {what}{row}, "
                              f"which Arrow's {column.arrow} cannot hold; add -o text_columns={column.name} to read "
                              "it as the server's text")


def _row_key(table: Table, page: pa.RecordBatch, row: int) -> str:
    """`` (row id=1)``: the key of the page's row ``row``, for a message; empty where the page lacks the key."""
    if not (table.key and all(name in page.schema.names for name in table.key_names)):
        return ""
    key = _key_at(table, page, row)
    return " (row " + ", ".join(f"{c.name}={text}" for c, text in zip(table.key, key, strict=True)) + ")"


def changed_since(relation: str, xmin: int) -> str:
    """The row versions that a snapshot whose xmin was ``xmin`` (64-bit) could not have seen, and some it could:
    those made by a transaction not older than ``xmin``. Every transaction older than a snapshot's xmin had ended
    when it was taken, so a row version it made was either seen (committed) or never visible (aborted); the rest
    may have committed after, late, below any high-water mark. A row's ``xmin`` is its 32-bit transaction id, kept
    when the row is frozen (PostgreSQL 9.4 on), so it is compared by ``age()``: the transactions since it, modulo
    2^32 (``age`` of the reading transaction's next id, which every row it sees is older than). The enumerator
    refuses a run more than about 2^31 transactions after the last. Subtransactions (savepoints) take ids above
    their parent's, so they fall in the window with it. An ancient frozen row whose id wrapped into the window is
    read again: an upsert of what the output holds."""
    return f"age({relation}.xmin) BETWEEN 0 AND age('{xmin % (1 << 32)}'::xid)"


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
