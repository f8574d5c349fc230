"""Reading a PostgreSQL range's pages into Arrow, through the ADBC driver (``COPY ... (FORMAT binary)`` decoded in
C), inside the run's snapshot.

A reader's session is one REPEATABLE READ transaction that imports the run's snapshot (when the copy exported
one). A key range is read in pages ordered by the key, each after the last key read; a block range in pages of whole
blocks (or, for pages of fewer rows than a block holds, of rows in ``ctid`` order). An incremental run's changed
rows that fit one page are read by its plan's scan (:func:`count_changed`) and handed to its reader, which opens no
session (:func:`handed_rows`).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import dataclasses
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from connectors._uuids import uuid_text
from connectors.postgres._catalog import Column, Table, ident, literal, one_line
from connectors.postgres._options import PostgresOptions
from connectors.postgres._plan import BLOCK, END, LAST_OFFSET, key_row
from connectors.postgres._session import Connection, connect, snapshot_gone
from splitsource import KeyRange, SplitReadError, ValueRangeError

__all__ = ["ROWS_PER_BLOCK", "Changed", "changed_since", "count_changed", "handed_rows", "key_condition", "page",
           "read_keys", "session"]

ROWS_PER_BLOCK = 291  # the most row versions an 8 KiB heap block holds (MaxHeapTuplesPerPage)


class SnapshotGoneError(SplitReadError):
    """The run's snapshot can no longer be imported (the server restarted, or the planner's session ended)."""


def session(options: PostgresOptions, table: Table, by_blocks: bool,
            lost: Callable[[str], None]) -> tuple[Connection, PostgresOptions]:
    """A reader's connection in a REPEATABLE READ transaction at the run's snapshot, and the options it was opened
    with. A snapshot that is gone: key ranges go on at a new instant (every key once, the rest of the run as of
    now: ``lost`` is told, and the options returned have no snapshot), block ranges cannot."""
    connection = connect(options, table.lc_monetary)
    try:
        _in_snapshot(connection, options)
        return connection, options
    except Exception as exc:
        connection.close()
        if not options.snapshot or not snapshot_gone(exc):
            raise  # a lost connection, a terminated backend: transient, the next fetch tries again
        if by_blocks:
            raise SnapshotGoneError(
                f"the copy's snapshot {options.snapshot} is gone ({one_line(exc)}): block-range splits cannot go on "
                "at another instant; run the copy again (it resumes, and refuses if the table changed)") from None
        lost(f"the run's snapshot is gone ({one_line(exc)}): this reader goes on at a new one")
        # the places of the changed rows were the snapshot's: at a new instant, the range is scanned for them
        return session(dataclasses.replace(options, snapshot="", tids=""), table, by_blocks, lost)


def page(connection: Connection | None, options: PostgresOptions, table: Table, split: KeyRange, limit: int,
         since: int | None, by_blocks: bool) -> tuple[pa.RecordBatch, object, bool]:
    """One page of ``split``: its rows as the table's Arrow schema, the key the next page reads after, and whether
    the range is done. ``since`` (an incremental run's): only the row versions the last run's snapshot, whose xmin
    that is, could not see (:func:`changed_since`); where the plan read them (no ``connection``: option ``rows``),
    those, a page that ends the range; where it found their places (option ``tids``), a key range reads those alone
    (a TID scan) instead of walking the key's index over every row of the range."""
    if connection is None:
        rows = handed_rows(options.rows)
        return _converted(table, rows), _key_at(table, rows, rows.num_rows - 1) if rows.num_rows else None, True
    conditions = [f"({options.where})"] if options.where else []
    relation = table.qualified
    order = ""
    if by_blocks:
        r, block, offset = split.after or (0, -1, LAST_OFFSET)
        if block == END:  # the last range ended relation r: read the next from its start
            r, block, offset = r + 1, -1, LAST_OFFSET
        relation = table.relations[r]
        upto = split.upto or (len(table.relations) - 1, END, 0)
        first = block + 1 if offset >= LAST_OFFSET else block
        blocks = min(limit // ROWS_PER_BLOCK, max(1, int(options.page_mb * 1024 * 1024) // BLOCK))
        end = first + max(1, blocks)
        if upto[1] != END:
            end = min(end, upto[1] + 1)
        if offset < LAST_OFFSET:
            conditions.append(f"ctid > '({block},{offset})'::tid")
        elif first > 0:
            conditions.append(f"ctid >= '({first},0)'::tid")
        conditions.append(f"ctid < '({end},0)'::tid")
        if not blocks:  # a page of fewer rows than a block holds (the kit's): rows in ctid order
            order = f" ORDER BY ctid LIMIT {limit}"
    else:
        conditions += key_condition(table, split)
        if options.tids and options.snapshot:  # an incremental run's changed rows, by their places in its snapshot
            conditions.append(f"ctid = ANY({literal(options.tids)}::tid[])")
        # qualified: a column read as text has an output column of its name, which would sort as text
        order = f" ORDER BY {', '.join(f'{relation}.{ident(c.name)}' for c in table.key)} LIMIT {limit}"
    if since is not None:
        conditions.append(changed_since(relation, since))
    columns = _page_columns(table, by_blocks) + (["ctid::text AS __ctid"] if by_blocks and order else [])
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    rows = connection.query(f"SELECT {', '.join(columns)} FROM {relation}{where}{order}")
    last: object
    if not by_blocks:
        done = rows.num_rows < limit
        last = _key_at(table, rows, rows.num_rows - 1) if rows.num_rows else None
    elif "__ctid" in rows.schema.names and rows.num_rows == limit:
        block, offset = map(int, rows.column("__ctid")[limit - 1].as_py().strip("()").split(","))
        last, done = (r, block, offset), (r, block, offset) >= upto
    else:
        last = (r, end - 1, LAST_OFFSET)
        done = last >= upto
        if upto[1] == END and not done:
            size = connection.query(f"SELECT pg_relation_size({literal(relation)}::regclass) / {BLOCK}")
            done = end >= size.column(0)[0].as_py()
    return _converted(table, rows), last, done


def _page_columns(table: Table, by_blocks: bool) -> list[str]:
    """What a page selects: the table's columns, a key range's the text of each key column whose Arrow value is not
    its text (:attr:`Table.key_names`), and each array column's shape check."""
    extra = [] if by_blocks else [f"{ident(c.name)}::text AS {name}" for c, name in
                                  zip(table.key, table.key_names, strict=True) if name.startswith("__k")]
    shapes = [f"{c.shape_check} AS {_shape_column(i)}" for i, c in enumerate(table.columns) if c.listed]
    return [c.select for c in table.columns] + extra + shapes


def _converted(table: Table, rows: pa.RecordBatch) -> pa.RecordBatch:
    """A page's rows as the driver gave them (:func:`_page_columns`), as the table's Arrow schema; a value that
    schema cannot hold is refused in one line."""
    _refuse_shapes(table, rows)
    arrays = _arrays(table, rows)
    _refuse_beyond_arrow(table, arrays, rows)
    return pa.RecordBatch.from_arrays(arrays, schema=table.schema)


def _handing(pages: list[pa.RecordBatch]) -> str:
    """Rows a plan read (batches of one schema), as the text of a reader option (Arrow IPC, zstd, base64: 50,000
    rows of the 5M-row bench table, 9.7 MB as the driver gave them, in 5.2 MB and 0.03 s)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pages[0].schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as stream:
        for rows in pages:
            stream.write_batch(rows)
    return base64.b64encode(sink.getvalue()).decode("ascii")


def handed_rows(text: str) -> pa.RecordBatch:
    """The rows a plan handed its readers (option ``rows``), as the driver gave them, in one batch."""
    rows = pa.ipc.open_stream(base64.b64decode(text)).read_all()
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in rows.columns], schema=rows.schema)


def read_keys(options: PostgresOptions, table: Table) -> Iterator[pa.RecordBatch]:
    """Every row of ``table`` (a table of its key columns alone), relation by relation in one query each, unordered
    (a scan, not a walk of the index), inside the run's snapshot when ``options`` has one."""
    connection = connect(options, table.lc_monetary)
    try:
        _in_snapshot(connection, options)
        for relation in table.relations:
            where = f" WHERE {options.where}" if options.where else ""
            page = connection.query(f"SELECT {', '.join(c.select for c in table.columns)} FROM {relation}{where}")
            yield pa.RecordBatch.from_arrays(_arrays(table, page), schema=table.schema)
    finally:
        connection.close()


@dataclasses.dataclass(frozen=True)
class Changed:
    """What an incremental run's scan (:func:`count_changed`) found in its snapshot: how many rows the table holds
    (None where the scan cannot count them), the keys of the row versions changed since the last run (``keys``:
    batches of the key columns), and for its readers either those rows themselves, where they fit one page
    (``rows``: the option's text, :func:`handed_rows`), or their places, as a ``tid[]`` literal (``tids``; for a
    table of one relation, whose places do not repeat); each "" where not."""

    count: int | None
    keys: list[pa.RecordBatch]
    rows: str
    tids: str


def count_changed(plan: Connection, options: PostgresOptions, table: Table, since: int, whole: int,
                  places: int) -> Changed:
    """The keys of the row versions of ``table`` that a snapshot whose xmin was ``since`` could not see
    (:func:`changed_since`), those rows as a key range's page reads them where they are at most ``whole``, else
    their places where they are at most ``places``, and how many rows the table holds, inside the run's snapshot
    (``plan``'s transaction's, which ``options`` has): one scan that sends the changed rows alone. Reading them here
    spares the run's reader its own sessions and a fetch by place (a new backend's first pass through the shared
    buffers, 0.1 s of page faults): on the 5M-row bench table, 50,000 changed rows cost the scan 0.07-0.09 s more
    than their keys, against the reader's 0.25-0.40 s. The rows are counted by the server's own count of the rows
    its scans fetched (``pg_stat_get_xact_tuples_returned``, the transaction's ``seq_tup_read``: every row the scan's
    snapshot sees, before any condition), read before and after: a ``count(*)`` in the same scan took 0.74-0.78 s of
    one session on a 5M-row table, against 0.50 s; no count where a ``where`` leaves rows out or the server counts
    nothing (``track_counts`` off). It reads runs of blocks (:func:`_block_runs`) on ``plan`` and on a session of
    its own at once, each taking the next run as it ends one, so that the two end within a run of each other,
    whichever started later (a session connects in 20-60 ms) or ran slower (a new backend's first scan through the
    shared buffers took 0.1 s more than its next)."""
    pending = collections.deque(_block_runs(plan, table))
    places = places if len(table.relations) == 1 else 0
    whole = whole if all(c in table.columns for c in table.key) else 0
    counted = not options.where and bool(plan.row("SELECT current_setting('track_counts')::bool")[0])
    found_rows = [0]  # about the changed rows both sessions found so far (unlocked): past ``whole``, the rows are
    # not asked for; past ``places``, their places
    keys = [f"{c.select} AS k{i}" for i, c in enumerate(table.key)]
    rows_read = _page_columns(table, False)
    fetched = (f"SELECT array_agg(pg_stat_get_xact_tuples_returned(r::regclass)) "
               f"FROM unnest(ARRAY[{', '.join(literal(r) for r in table.relations)}]) AS r")
    keyed = dataclasses.replace(table, columns=table.key)
    at = [table.columns.index(c) for c in table.key] if whole else []  # the key columns among the rows read

    def read(own: bool) -> tuple[int, list[pa.RecordBatch], list[pa.RecordBatch | None], list[pa.Array | None]]:
        found, rows, tids = [], [], []
        with connect(options, table.lc_monetary) if own else contextlib.nullcontext(plan) as connection:
            if own:
                _in_snapshot(connection, options)
            if counted:  # each run a TID range scan, the one plan whose fetched rows are the run's (a seq scan with
                # the range as a filter would fetch the whole relation's; one by a parallel worker, none of them)
                connection.query("SELECT " + ", ".join(f"set_config('{name}', '{value}', true)" for name, value in (
                    ("enable_seqscan", "off"), ("enable_indexscan", "off"), ("enable_bitmapscan", "off"),
                    ("max_parallel_workers_per_gather", "0"))))
            before = connection.row(fetched)[0] if counted else []
            while True:
                try:
                    relation, blocks = pending.popleft()
                except IndexError:  # every run taken
                    break
                read_rows = whole and found_rows[0] <= whole
                place = places and found_rows[0] <= places
                where = " AND ".join([*([f"({options.where})"] if options.where else []), *([blocks] if blocks else []),
                                      changed_since(relation, since)])
                columns = (rows_read if read_rows else keys) + (["ctid::text"] if place else [])
                batch = connection.query(f"SELECT {', '.join(columns)} FROM {relation} WHERE {where}")
                found_rows[0] += batch.num_rows
                page = batch.select(range(len(rows_read))) if read_rows else None
                key_columns = [page.column(i) for i in at] if page is not None else batch.columns[:len(keys)]
                found.append(pa.RecordBatch.from_arrays(
                    _arrays(keyed, pa.RecordBatch.from_arrays(key_columns, names=keys)), schema=keyed.schema))
                if whole:
                    rows.append(page)
                if places:
                    tids.append(batch.column(len(columns) - 1) if place else None)
            after = connection.row(fetched)[0] if counted else []
        return sum(after) - sum(before), found, rows, tids

    from concurrent.futures import ThreadPoolExecutor  # here: a reader's process never needs it (15 ms to import)

    with ThreadPoolExecutor(max_workers=2) as pool:  # the driver lets go of the GIL while it waits
        parts = list(pool.map(read, (False, True)[:len(pending)]))  # one run: no second session
    found = [batch for _, batches, _, _ in parts for batch in batches if batch.num_rows]
    total = sum(batch.num_rows for batch in found)
    rows = [page for _, _, pages, _ in parts for page in pages]
    tids = [tid for _, _, _, arrays in parts for tid in arrays]
    handed = bool(whole) and None not in rows and total <= whole
    placed = not handed and bool(places) and None not in tids and total <= places
    return Changed(
        sum(count for count, _, _, _ in parts) if counted else None, found,
        _handing(rows) if handed else "",
        "{" + ",".join(f'"{t}"' for array in tids if array is not None for t in array.to_pylist()) + "}"
        if placed else "")


RUN_BLOCKS = 8192  # 64 MiB: a run of blocks :func:`count_changed` reads in one query, at most


def _block_runs(connection: Connection, table: Table) -> list[tuple[str, str]]:
    """Each relation of ``table`` as runs of at most ``RUN_BLOCKS`` blocks (a query a run costs 1-3 ms), each a
    relation and its TID range condition (PostgreSQL 14 on; the last run reads to the relation's end); before 14,
    each relation whole."""
    runs = []
    for relation in table.relations:
        blocks = connection.query(f"SELECT pg_relation_size({literal(relation)}::regclass) / {BLOCK}"
                                  ).column(0)[0].as_py() if table.server_version >= 140000 else 0
        for start in range(0, blocks, RUN_BLOCKS) if blocks else [0]:
            bounds = ([f"ctid >= '({start},0)'::tid"] if start else []) + (
                [f"ctid < '({start + RUN_BLOCKS},0)'::tid"] if start + RUN_BLOCKS < blocks else [])
            runs.append((relation, " AND ".join(bounds)))
    return runs


def _in_snapshot(connection: Connection, options: PostgresOptions) -> None:
    connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    if options.snapshot:
        connection.execute(f"SET TRANSACTION SNAPSHOT {literal(options.snapshot)}")
        if options.tids:
            # the planner takes a TID scan for a random read a page each: for 50,000 places on a 5M-row table it
            # chose a parallel scan of the whole table (0.65 s, where the TID scan took 0.06 s) or, for a small
            # page, a walk of the key's index; neither is needed where every row is fetched by its place
            connection.query("SELECT " + ", ".join(f"set_config('enable_{scan}', 'off', true)"
                                                   for scan in ("seqscan", "indexscan", "bitmapscan")))


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
            raise _cannot_hold(table, column, page, row, "an array of more than one dimension, or whose first index "
                               "is not 1", column.arrow, " as it is")


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
        return uuid_text(values)
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
            raise _cannot_hold(table, column, page, rows(item), str(text), decimal, " exactly") from None
    raise ValueRangeError(f"connector 'postgres': column {column.name} of {table.label}: {failure}")


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
        raise _cannot_hold(table, column, page, rows(int(np.argmax(hit))), what, column.arrow)


def _cannot_hold(table: Table, column: Column, page: pa.RecordBatch, row: int, value: str, arrow: pa.DataType,
                 how: str = "") -> ValueRangeError:
    """The one-line refusal of ``value``, in the page's ``row`` of ``column``, that Arrow's ``arrow`` cannot hold
    (``how``: " exactly"): it names the column, the value, the row's key where the page has it (`` (row id=1)``),
    and the option that reads the column as the server's text."""
    key = ""
    if table.key and all(name in page.schema.names for name in table.key_names):
        key = " (row " + ", ".join(f"{c.name}={text}" for c, text in
                                   zip(table.key, _key_at(table, page, row), strict=True)) + ")"
    return ValueRangeError(f"connector 'postgres': column {column.name} of {table.label} holds {value}{key}, which "
                           f"Arrow's {arrow} cannot hold{how}; add -o text_columns={column.name} to read it as the "
                           "server's text", row)


def changed_since(relation: str, xmin: int) -> str:
    """The row versions that a snapshot whose xmin was ``xmin`` (64-bit) could not have seen, and some it could:
    those made by a transaction not older than ``xmin``. Every transaction older than a snapshot's xmin had ended
    when it was taken, so a row version it made was either seen (committed) or never visible (aborted); the rest
    may have committed after, late, below any high-water mark. A row's ``xmin`` is its 32-bit transaction id, kept
    when the row is frozen (PostgreSQL 9.4 on), so it is compared by ``age()``: the transactions since it, modulo
    2^32 (``age`` of the reading transaction's next id, which every row it sees is older than). The enumerator
    refuses a run more than about 2^31 transactions after the last. Subtransactions (savepoints) take ids above
    their parent's, so they fall in the window with it. An ancient frozen row whose id wrapped into the window is
    read again: an upsert of what the output holds. One ``age()`` a row, against the window's end computed once (a
    sub-select): the int4 read as an unsigned ``oid`` puts a negative age (an id wrapped, 2^31 or more behind) past
    the end, as ``BETWEEN 0 AND`` would with two calls a row."""
    return f"age({relation}.xmin)::oid <= (SELECT age('{xmin % (1 << 32)}'::xid))::oid"


def key_condition(table: Table, split: KeyRange) -> list[str]:
    """The SQL conditions that keep a key range's rows (row comparisons for a composite key): after ``split.after``,
    up to ``split.upto``."""
    names = [f"{table.qualified}.{ident(c.name)}" for c in table.key]
    key = names[0] if len(names) == 1 else f"({', '.join(names)})"
    out = []
    if split.after is not None:
        out.append(f"{key} > {key_row(table, split.after)}")
    if split.upto is not None:
        out.append(f"{key} <= {key_row(table, split.upto)}")
    return out
