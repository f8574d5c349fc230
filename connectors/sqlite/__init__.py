"""The SQLite connector: one rowid table of a SQLite file, read in rowid ranges (``connector=sqlite``); an
incremental copy's next run reads the rows added since, or with option ``cursor`` those changed since.

Built on the key-range short path (:class:`splitsource.KeyRangeSource`): it is the connector guide's second worked
example. Columns map by SQLite's type affinity (docs/sqlite.md): INTEGER to int64, REAL to float64, TEXT to string,
BLOB (or no declared type) to binary; a declared BOOL or BOOLEAN to int64 (SQLite stores 0 and 1); every other
declared type (NUMERIC, DECIMAL, DATE, DATETIME, ...) to string, SQLite's own text of the value. A value that its
column's Arrow type cannot hold exactly (text in an INTEGER column, say) stops the read in one line.
"""

import functools
import math
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from splitsource import Changes, KeyRange, KeyRangeSource, OptionsError, ValueRangeError, option

# SQLite's affinity rules in its order (sqlite.org/datatype3.html, 3.1), BOOL first; None: NUMERIC, read as text
_AFFINITY = (("BOOL", pa.int64()), ("INT", pa.int64()), ("CHAR", pa.string()), ("CLOB", pa.string()),
             ("TEXT", pa.string()), ("BLOB", pa.binary()), ("REAL", pa.float64()), ("FLOA", pa.float64()),
             ("DOUB", pa.float64()), ("", None))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _rowid(columns: Iterable[str]) -> str:
    """The rowid's first name no column takes ("": none; a column named rowid hides the rowid by that name)."""
    taken = {name.lower() for name in columns}
    return next((name for name in ("rowid", "_rowid_", "oid") if name not in taken), "")


def _column(name: str, declared: str) -> tuple[str, str, pa.DataType]:
    """A column's name, how it is selected, and its Arrow type."""
    arrow = next(arrow for part, arrow in _AFFINITY if part in declared.upper()) if declared else pa.binary()
    return (name, _quote(name), arrow) if arrow else (name, f"CAST({_quote(name)} AS TEXT)", pa.string())


@dataclass(frozen=True)
class SQLiteOptions:
    file: str = option(doc="the SQLite database file (opened read-only)")
    table: str = option(doc="the table to read (a rowid table)")
    split_rows: int = option(100_000, doc="rows per split", minimum=1)
    cursor: str = option("", doc="a NOT NULL column every insert and update sets, never below the greatest before "
                                 "it (an updated_at the writing statement sets): an incremental copy's next run "
                                 "reads the rows changed since, and finds the deletes (empty: the rows added)")


class SQLiteSource(KeyRangeSource[SQLiteOptions]):
    name = "sqlite"
    options_class = SQLiteOptions

    def connect(self) -> sqlite3.Connection:
        if not (file := Path(self.options.file)).is_file():
            raise OptionsError(f"connector 'sqlite': option 'file': no such file: {file}")
        return sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)

    @functools.cached_property
    def _info(self) -> list[tuple[str, str, int, int]]:
        """Each column's name, declared type, NOT NULL, and place in the primary key."""
        table = self.options.table
        with closing(self.connect()) as db:
            try:
                found = db.execute('SELECT name, type, "notnull", pk FROM pragma_table_info(?)', [table]).fetchall()
                kind = db.execute("SELECT type FROM sqlite_master WHERE name = ? COLLATE NOCASE", [table]).fetchone()
            except sqlite3.DatabaseError as exc:  # the file's first query: not a database, or a damaged one
                if isinstance(exc, sqlite3.OperationalError):  # locked, busy: not the option's fault
                    raise
                raise OptionsError(f"connector 'sqlite': option 'file': {self.options.file}: {exc}") from None
            rowid = _rowid(name for name, *_ in found)
            if found and kind == ("table",) and rowid:
                try:
                    db.execute(f"SELECT {rowid} FROM {_quote(table)} LIMIT 0")
                except sqlite3.OperationalError:  # no such column
                    kind = ("WITHOUT ROWID table",)
        if not found:
            raise OptionsError(f"connector 'sqlite': no table {table!r} in {self.options.file}")
        if kind not in (("table",), None) or not rowid:  # a view's rowids are nulls: it would read as empty
            what = f"a {kind[0]}" if rowid else "a table whose columns hide rowid, _rowid_ and oid"
            raise OptionsError(f"connector 'sqlite': option 'table': {table} is {what}, which has no rowid to "
                               "read it in ranges of: copy a rowid table")
        return found

    @functools.cached_property
    def _columns(self) -> list[tuple[str, str, pa.DataType]]:
        return [_column(name, declared) for name, declared, _, _ in self._info]

    @functools.cached_property
    def _rowid(self) -> str:
        return _rowid(name for name, _, _ in self._columns)

    def schema(self) -> pa.Schema:
        return pa.schema([(name, arrow) for name, _, arrow in self._columns])

    def last_key(self) -> Any:
        """The greatest rowid: an incremental copy's next run reads the rows added after it (SQLite gives a new row
        a rowid above every other's, unless the greatest was deleted and the table is not AUTOINCREMENT)."""
        with closing(self.connect()) as db:
            return db.execute(f"SELECT max({self._rowid}) FROM {_quote(self.options.table)}").fetchone()[0]

    def key_columns(self) -> list[str]:
        """The INTEGER PRIMARY KEY (the rowid's own name), if the table has one."""
        keys = [(name, declared) for name, declared, _, pk in self._info if pk]
        return [keys[0][0]] if len(keys) == 1 and keys[0][1].upper() == "INTEGER" else []

    def incremental(self) -> Changes:
        """By the rowid (rows added), or by option ``cursor`` (rows changed, replaced by their key)."""
        cursor = self.options.cursor
        if not cursor:
            return super().incremental()
        table = self.options.table
        if not any(name == cursor and notnull for name, _, notnull, _ in self._info):
            raise OptionsError(f"connector 'sqlite': option 'cursor': table {table} has no NOT NULL column {cursor} "
                               "(a row without a cursor value would never be read again)")
        if not self.key_columns():
            raise OptionsError(f"connector 'sqlite': option 'cursor': table {table} has no INTEGER PRIMARY KEY to "
                               "replace a changed row by")
        return Changes.UPSERTS

    def last_cursor(self) -> Any:
        with closing(self.connect()) as db:
            return db.execute(f"SELECT max({_quote(self.options.cursor)}) FROM {_quote(self.options.table)}"
                              ).fetchone()[0]

    def cursor_rows(self, value: Any) -> Any:
        with closing(self.connect()) as db:
            return db.execute(self._select(f"WHERE {_quote(self.options.cursor)} = ?"), [value]).fetchall()

    def keys(self) -> Iterator[pa.RecordBatch] | None:
        """Every key now, where runs read by a cursor (rows only added are never deleted)."""
        if not self.options.cursor:
            return None
        with closing(self.connect()) as db:
            ids = db.execute(f"SELECT {self._rowid} FROM {_quote(self.options.table)} ORDER BY 1").fetchall()
        return iter([pa.record_batch([pa.array([i for i, in ids], pa.int64())], names=self.key_columns())])

    def boundaries(self) -> Any:
        with closing(self.connect()) as db:
            low, high, count = db.execute(f"SELECT min({self._rowid}), max({self._rowid}), count(*) FROM "
                                          f"{_quote(self.options.table)}").fetchone()
        size = int(Path(self.options.file).stat().st_size * min(1.0, self.options.split_rows / max(count, 1)))
        step = math.ceil((high - low + 1) * self.options.split_rows / count) if count else 1
        return ((upto, size) for upto in range(low + step - 1, high, step)) if count else ()

    def _select(self, where: str) -> str:
        columns = ", ".join(selected for _, selected, _ in self._columns)
        return f"SELECT {self._rowid}, {columns} FROM {_quote(self.options.table)} {where} ORDER BY {self._rowid}"

    def read(self, connection: sqlite3.Connection, split: KeyRange, limit: int) -> tuple[pa.RecordBatch, Any, bool]:
        bounds = [-math.inf if split.after is None else split.after, math.inf if split.upto is None else split.upto]
        where, cursor = f"WHERE {self._rowid} > ? AND {self._rowid} <= ?", split.cursor
        if cursor is not None:  # a run of updates: the rows whose cursor is in its range
            column = _quote(self.options.cursor)
            where += f" AND {column} <= ?" + ("" if cursor.after is None else
                                             f" AND {column} {'>=' if cursor.at_after else '>'} ?")
            bounds += [cursor.upto] + ([] if cursor.after is None else [cursor.after])
        rows = connection.execute(self._select(where) + " LIMIT ?", (*bounds, limit))
        ids, *values = list(zip(*rows.fetchall(), strict=True)) or [()] * (len(self._columns) + 1)
        try:  # SQLite keeps any value in any column: one its column's Arrow type cannot hold stops the read
            arrays = [pa.array(v, arrow) for v, (_, _, arrow) in zip(values, self._columns, strict=True)]
        except (TypeError, ValueError) as exc:
            raise ValueRangeError(f"connector 'sqlite': table {self.options.table}: {exc}") from None
        # SQLite returns every row LIMIT asks for, so fewer end the range (wake_up: the connection's interrupt())
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema()), (ids or (None,))[-1], len(ids) < limit

    def reference_rows(self, part: int = 0, parts: int = 1) -> Any:
        with closing(self.connect()) as db:
            yield from (row[1:] for row in db.execute(self._select(f"WHERE abs({self._rowid}) % {parts} = {part}")))
