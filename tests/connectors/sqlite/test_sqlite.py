"""The SQLite connector, the key-range short path's worked example: the kit, every storage class and the declared
types exact against the values the test inserted (read back by pyarrow, DuckDB and Spark), kill storms on both
engines ending with every row once, and one-line refusals."""

from __future__ import annotations

import ast
import math
import sqlite3
import struct
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.sqlite import SQLiteSource
from splitsource.testing import check_all, check_incremental
from tests.splitsource.copyjob.kill_points import ENGINE_POINTS
from tests.splitsource.copyjob.test_copy import kill_and_rerun, run

ROOT = Path(__file__).resolve().parents[3]


def make_numbers(path: Path, rows: int) -> None:
    """``t``: ``rows`` rows keyed by an INTEGER PRIMARY KEY with gaps (3, 6, 9, ...); every tenth name NULL."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?)",
                       ((3 * i, None if i % 10 == 0 else f"name {i}", i / 4) for i in range(1, rows + 1)))
    db.close()


def cli(path: Path, **extra: str) -> list[str]:
    pairs = {"file": str(path), "table": "t", **extra}
    return ["--connector", "sqlite", *[a for k, v in pairs.items() for a in ("-o", f"{k}={v}")]]


def test_the_kit_passes_and_the_source_stays_short_in_3_classes(tmp_path: Path) -> None:
    make_numbers(tmp_path / "n.db", 100_000)
    # the reference is what make_numbers inserted, typed as the connector declares the columns
    ids = range(1, 100_001)
    inserted = pa.table({"id": pa.array([3 * i for i in ids], pa.int64()),
                         "name": pa.array([None if i % 10 == 0 else f"name {i}" for i in ids], pa.string()),
                         "score": pa.array([i / 4 for i in ids], pa.float64())})
    source = SQLiteSource({"file": str(tmp_path / "n.db"), "table": "t", "split_rows": "30000"})
    assert inserted.schema.names == source.schema().names
    check_all(source, inserted.cast(source.schema()))

    source = (ROOT / "connectors" / "sqlite" / "__init__.py").read_text()
    tree = ast.parse(source)
    docs = {line for node in ast.walk(tree) if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
            and ast.get_docstring(node) for line in range(node.body[0].lineno, node.body[0].end_lineno + 1)}  # type: ignore[operator]
    code = [line for n, line in enumerate(source.splitlines(), 1)
            if line.strip() and not line.strip().startswith("#") and n not in docs]
    # the short path's promise: a real source, incremental runs of rows added (last_key) and of rows changed by a
    # cursor (last_cursor, deletes included) among them, in 130 lines
    assert len(code) <= 130, f"connectors/sqlite is {len(code)} lines of code"
    assert sum(isinstance(node, ast.ClassDef) for node in ast.walk(tree)) <= 3


def test_the_kit_finds_an_incremental_run_reads_exactly_the_rows_added_since(tmp_path: Path) -> None:
    make_numbers(tmp_path / "n.db", 5000)
    source = SQLiteSource({"file": str(tmp_path / "n.db"), "table": "t", "split_rows": "700"})
    added = [(3 * i, f"name {i}", i / 4) for i in range(5001, 5801)]

    def insert() -> SQLiteSource:
        with closing(sqlite3.connect(tmp_path / "n.db")) as db, db:
            db.executemany("INSERT INTO t VALUES (?, ?, ?)", added)
        return source

    expected = pa.table(list(zip(*added, strict=True)), schema=source.schema())
    check_incremental(source, insert, expected)


def make_orders(path: Path, rows: int, at: Callable[[int], str] = lambda i: f"t{i:08d}") -> dict[int, tuple[Any, ...]]:
    """``o``: ``rows`` rows under an INTEGER PRIMARY KEY, each with the cursor value ``at(id)`` (``updated_at``,
    text, NOT NULL); returns them by id, as the test wrote them."""
    rows_by_id = {i: (i, f"name {i}", at(i)) for i in range(1, rows + 1)}
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE o (id INTEGER PRIMARY KEY, name TEXT, updated_at TEXT NOT NULL)")
        db.executemany("INSERT INTO o VALUES (?, ?, ?)", rows_by_id.values())
    return rows_by_id


def write(path: Path, truth: dict[int, tuple[Any, ...]], upserts: list[tuple[Any, ...]], deletes: list[int]) -> None:
    """Upsert and delete rows of ``o``, in one commit, and in ``truth``."""
    with closing(sqlite3.connect(path)) as db, db:
        db.executemany("INSERT OR REPLACE INTO o VALUES (?, ?, ?)", upserts)
        db.executemany("DELETE FROM o WHERE id = ?", [(i,) for i in deletes])
    truth.update({row[0]: row for row in upserts})
    for i in deletes:
        del truth[i]


def newest(out: Path) -> list[tuple[Any, ...]]:
    """Each key's newest version in the output files, deletes left out: docs/incremental.md's query (DuckDB)."""
    return duckdb.sql(f"""SELECT id, name, updated_at FROM read_parquet('{out}/**/*.parquet')
                          QUALIFY row_number() OVER (PARTITION BY id ORDER BY _splitsource_run DESC) = 1
                          AND _splitsource_change = 'upsert' ORDER BY id""").fetchall()


def test_the_kit_finds_a_run_by_a_cursor_reads_exactly_the_rows_changed_since_and_lists_the_deletes(
        tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    truth = make_orders(db, 3000)
    source = SQLiteSource({"file": str(db), "table": "o", "split_rows": "700", "cursor": "updated_at"})
    updated = [(i, "changed", f"u{i:08d}") for i in range(7, 3001, 7)]
    added = [(i, "added", f"v{i:08d}") for i in range(3001, 3101)]
    deleted = [i for i in range(11, 3001, 11) if i % 7]

    def change() -> SQLiteSource:
        write(db, truth, updated + added, deleted)
        return source

    expected = pa.table(list(zip(*updated + added, strict=True)), schema=source.schema())
    check_incremental(source, change, expected, deleted=pa.table({"id": pa.array(deleted, pa.int64())}))


def test_rows_that_share_the_cursor_value_a_run_ended_at_reach_the_next_run(tmp_path: Path) -> None:
    """The cursor values two commits share across a run's end (a clock's one tick: 999 rows written with one
    value, then, after the run, one row more and one changed with that same value): the next run reads the rows
    holding the last run's greatest value again, since a digest of them moved, and lands both; a run after it,
    with nothing changed, commits nothing; a delete alone reaches the next run. Compared with the rows the test
    wrote, read with DuckDB's query for the newest version of each key, and verified."""
    db, out = tmp_path / "o.db", tmp_path / "out"
    truth = make_orders(db, 1000, at=lambda i: f"2026-12-02 {'09' if i == 1 else '10'}:00:00")
    args = ["copy", *cli(db, table="o", cursor="updated_at", split_rows="300"), "--output", str(out),
            "--engine", "local", "--incremental", "--quiet"]
    first = run(args)
    assert first.returncode == 0 and "a full copy" in first.stdout, first.stderr
    write(db, truth, [(1001, "same tick", "2026-12-02 10:00:00"), (500, "changed, same tick", "2026-12-02 10:00:00")],
          [])
    second = run(args)
    assert second.returncode == 0 and second.stdout.startswith("run 2 of an incremental copy"), second.stderr
    assert "1 row inserted" in second.stdout and "0 deleted" in second.stdout, second.stdout
    assert newest(out) == sorted(truth.values())
    third = run(args)
    assert third.returncode == 0 and third.stdout.startswith("run 3: nothing changed since run 2"), third.stdout
    write(db, truth, [], [1])  # a delete moves no cursor: the run's keys find it
    fourth = run(args)
    assert "0 rows inserted, 0 updated and 1 deleted (by key)" in fourth.stdout, fourth.stdout + fourth.stderr
    assert newest(out) == sorted(truth.values())
    verified = run(["verify", *cli(db, table="o", cursor="updated_at"), "--output", str(out)])
    assert verified.returncode == 0 and verified.stdout.startswith("MATCH"), verified.stdout + verified.stderr


def test_a_cursor_that_may_be_null_or_a_table_without_an_integer_primary_key_is_refused_in_one_line(
        tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    make_orders(db, 10)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE n (id INTEGER PRIMARY KEY, updated_at TEXT)")
        conn.execute("CREATE TABLE k (code TEXT PRIMARY KEY, updated_at TEXT NOT NULL)")
    for table, cursor, words in (("n", "updated_at", "table n has no NOT NULL column updated_at"),
                                 ("o", "missing", "table o has no NOT NULL column missing"),
                                 ("k", "updated_at", "table k has no INTEGER PRIMARY KEY")):
        done = run(["copy", *cli(db, table=table, cursor=cursor), "--output", str(tmp_path / "out"),
                    "--incremental", "--quiet"])
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert f"connector 'sqlite': option 'cursor': {words}" in done.stderr, done.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_kill_storm_inside_a_run_by_a_cursor_ends_with_each_change_once(tmp_path: Path) -> None:
    """A run by a cursor, killed four times at named points and run to its end, keeps the cursor values its plan
    began with (each range carries them): the output's newest versions are the table as the test wrote it."""
    db, out = tmp_path / "o.db", tmp_path / "out"
    truth = make_orders(db, 20_000)
    args = ["copy", *cli(db, table="o", cursor="updated_at", split_rows="1000"), "--output", str(out),
            "--engine", "local", "--workers", "2", "--max-splits-per-batch", "2", "--incremental", "--quiet"]
    assert run(args).returncode == 0
    write(db, truth, [(i, "changed", f"u{i:08d}") for i in range(2, 20_001, 2)], list(range(7, 20_001, 14)))
    final = kill_and_rerun(args, out, kills=4, seed=54)
    assert "0 rows inserted, 10,000 updated and 1,429 deleted (by key)" in final, final
    assert newest(out) == sorted(truth.values())


# every storage class at its edges, and the declared types that are no storage class of their own
BIG = 2**63 - 1
VALUES: list[tuple[Any, ...]] = [
    # id, i INTEGER, r REAL, s TEXT, b BLOB, d DATE, f BOOLEAN, n NUMERIC, u (no type: BLOB affinity)
    (1, BIG, math.inf, "plain", b"", "2026-11-26", 1, "12.50", b"\x00"),
    (2, -BIG - 1, -math.inf, "ünïcødé 中文 🎉 \u200d", b"\x00\xff" * 100, "0001-01-01", 0, 7, b"x" * 70_000),
    (3, 0, -0.0, "", bytes(range(256)), "9999-12-31 23:59:59", None, 1e300, None),
    (4, None, 5e-324, "nul \x00 inside", None, None, 1, None, b"last"),
    (5, 1, float("nan"), None, b"\x01", "2026-02-29?", 0, "not a number", b""),  # SQLite stores NaN as NULL
]
DECLARED = "id INTEGER PRIMARY KEY, i INTEGER, r REAL, s TEXT, b BLOB, d DATE, f BOOLEAN, n NUMERIC, u"


def _as_sqlite_keeps(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """What SQLite itself returns for an inserted row, written out by hand: a REAL column stores NaN as NULL and
    -0.0 as the integer 0 (so it reads 0.0), and a NUMERIC column keeps text that is no number as text and a
    number as a number, which the connector reads as SQLite's own text of it."""
    id_, i, r, s, b, d, f, n, u = row
    real = None if isinstance(r, float) and math.isnan(r) else (0.0 if r == 0 else r)
    number = {"12.50": "12.5", 7: "7", 1e300: "1.0e+300"}.get(n, n)
    return id_, i, real, s, b, d, f, number, u


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack(">d", a) == struct.pack(">d", b)  # -0.0 is not 0.0
    return bool(a == b) and type(a) is type(b)


def test_every_storage_class_is_exact_in_every_reader(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "values.db"
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE t ({DECLARED})")
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", VALUES)
    db.close()
    truth = [_as_sqlite_keeps(row) for row in VALUES]
    with sqlite3.connect(path) as db:  # the test's hand-written truth is SQLite's own
        stored = list(db.execute("SELECT id, i, r, s, b, d, f, CAST(n AS TEXT), u FROM t ORDER BY id"))
    db.close()
    assert all(_same(g, w) for got, want in zip(stored, truth, strict=True) for g, w in zip(got, want, strict=True))
    out = tmp_path / "out"
    done = run(["copy", *cli(path), "--output", str(out), "--engine", "local", "--quiet"])
    assert done.returncode == 0, done.stderr

    names = ["id", "i", "r", "s", "b", "d", "f", "n", "u"]
    arrow = pq.read_table(out).select(names).sort_by("id")
    assert [str(t) for t in arrow.schema.types] == ["int64", "int64", "double", "string", "binary", "string",
                                                    "int64", "string", "binary"]
    by_arrow = list(zip(*(arrow.column(c).to_pylist() for c in names), strict=True))
    by_duckdb = duckdb.sql(f"SELECT {', '.join(names)} FROM read_parquet('{out}/**/*.parquet') ORDER BY id").fetchall()
    frame = spark.read.format("splitsource").option("connector", "sqlite").option("file", str(path)) \
        .option("table", "t").load()
    by_spark = [tuple(bytes(v) if isinstance(v, bytearray) else v for v in row)
                for row in frame.orderBy("id").select(*names).collect()]
    for reader, rows in (("pyarrow", by_arrow), ("duckdb", by_duckdb), ("spark", by_spark)):
        assert len(rows) == len(truth), reader
        for got, want in zip(rows, truth, strict=True):
            bad = [names[k] for k, (g, w) in enumerate(zip(got, want, strict=True)) if not _same(g, w)]
            assert not bad, f"{reader}: row {want[0]}: {bad}: {got} != {want}"
    verified = run(["verify", *cli(path), "--output", str(out)])
    assert verified.returncode == 0 and verified.stdout.startswith("MATCH"), verified.stdout + verified.stderr


def test_a_value_its_column_type_cannot_hold_stops_the_copy_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, amount INTEGER)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(1, 5), (2, "five")])  # SQLite keeps the text
    db.close()
    done = run(["copy", *cli(path), "--output", str(tmp_path / "out"), "--engine", "local", "--quiet"])
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "connector 'sqlite': table t" in lines[0] and "five" in lines[0], done.stderr


def test_a_missing_file_a_file_no_database_or_a_table_of_no_rowid_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Each refused before anything is written; a view read as empty (its rowids are nulls: "copy finished: 0 rows"),
    and a WITHOUT ROWID table failed on an unexpected OperationalError, exit 1."""
    make_numbers(tmp_path / "n.db", 10)
    with closing(sqlite3.connect(tmp_path / "n.db")) as db:
        db.execute("CREATE VIEW v AS SELECT * FROM t")
        db.execute("CREATE TABLE w (k TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID")
        db.execute("INSERT INTO w VALUES ('a', 1)")
        db.execute("CREATE TABLE hidden (rowid TEXT, _ROWID_ INTEGER, oid REAL)")  # no name left for the rowid
        db.execute("CREATE TABLE wr (rowid TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID")  # rowid: a column
        db.commit()
    (tmp_path / "text.db").write_text("not a database, but a file of text\n" * 100)
    for options, words in (({"file": str(tmp_path / "nope.db")}, "option 'file': no such file"),
                           ({"file": str(tmp_path / "text.db")}, "option 'file': " + str(tmp_path / "text.db")
                            + ": file is not a database"),
                           ({"table": "missing"}, "no table 'missing'"),
                           ({"table": "v"}, "option 'table': v is a view, which has no rowid"),
                           ({"table": "w"}, "option 'table': w is a WITHOUT ROWID table, which has no rowid"),
                           ({"table": "wr"}, "option 'table': wr is a WITHOUT ROWID table, which has no rowid"),
                           ({"table": "hidden"}, "option 'table': hidden is a table whose columns hide rowid, _rowid_ "
                            "and oid, which has no rowid")):
        done = run(["copy", *cli(tmp_path / "n.db", **options), "--output", str(tmp_path / "out"), "--quiet"])
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("declared", ["INTEGER", "TEXT"])
def test_a_column_named_rowid_is_copied_as_a_column_and_the_rows_are_read_by_their_rowid(tmp_path: Path,
                                                                                         declared: str) -> None:
    """A column named rowid (here repeated, and null in a row of four) hides the rowid by that name: the rows are
    read in ranges of _rowid_, every one once, and the column is copied as it is. Read by its name, the rows whose
    column was null were in no range (250 of 1,000 lost, and the copy said it finished), and a text column ended
    the plan on a Python TypeError."""
    with closing(sqlite3.connect(tmp_path / "r.db")) as db:
        db.execute(f"CREATE TABLE r (rowid {declared}, n INTEGER)")
        db.executemany("INSERT INTO r VALUES (?, ?)", [(i // 25 if i % 4 else None, i) for i in range(1000)])
        db.commit()
    out = tmp_path / "out"
    done = run(["copy", *cli(tmp_path / "r.db", table="r", split_rows="100"), "--output", str(out), "--quiet"])
    assert done.returncode == 0, done.stderr
    assert duckdb.sql(f"SELECT count(*), count(DISTINCT n), count(rowid), min(n), max(n) FROM "
                      f"read_parquet('{out}/**/*.parquet')").fetchall() == [(1000, 1000, 750, 0, 999)]


@pytest.mark.slow
# on Spark, where its readers run (kill_points.ENGINE_POINTS): each restart starts a JVM
@pytest.mark.parametrize("engine,kills", [("local", 10), ("spark", 2)])
def test_a_sigkill_storm_ends_with_every_row_once(tmp_path: Path, engine: str, kills: int) -> None:
    make_numbers(tmp_path / "n.db", 200_000)
    out = tmp_path / "out"
    args = ["copy", *cli(tmp_path / "n.db", split_rows="2000"), "--output", str(out), "--engine", engine,
            "--max-splits-per-batch", "2", "--quiet"]
    kill_and_rerun(args, out, kills=kills, seed=13, points=ENGINE_POINTS if engine == "spark" else None)
    table = pq.read_table(out, columns=["id", "name"])
    ids = table.column("id").to_pylist()
    assert sorted(ids) == [3 * i for i in range(1, 200_001)]  # every row once
    assert table.column("name").null_count == 20_000


def test_a_copy_killed_then_resumed_after_inserts_moved_its_boundaries_holds_every_key_once(tmp_path: Path) -> None:
    """The guide's promise for the short path: SQLite's ranges follow the table (its rowids' span and count), so
    rows inserted between a kill and the re-run move every boundary. The re-run replays the batch the kill left,
    then restores the enumerator's state (the last key handed out) and cuts the rest from the new boundaries:
    every key the table held once, and every row inserted past the killed batch copied, none twice. Rows inserted
    after the greatest key the plan began with are not this copy's: a run reads up to that key (``last_key``), and
    an incremental copy's next run reads them."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.splitsource.copyjob.test_copy import KILL_POINTS, committed_rows

    db, out, gate = tmp_path / "n.db", tmp_path / "out", tmp_path / "gate"
    make_numbers(db, 20_000)  # rowids 3, 6, ..., 60,000: ten ranges of 2,000
    gate.mkdir()
    args = ["copy", *cli(db, split_rows="2000"), "--output", str(out), "--engine", "local", "--workers", "1",
            "--max-splits-per-batch", "2", "--quiet"]
    held = subprocess.Popen([sys.executable, str(KILL_POINTS), str(gate), "written", *args], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (gate / "reached").exists():
        assert held.poll() is None, held.communicate()[1]
        assert time.monotonic() < deadline, "the copy never reached its second batch"
        time.sleep(0.02)
    os.killpg(held.pid, signal.SIGKILL)
    held.wait()
    first = committed_rows(out)
    assert 0 < first < 20_000
    inside = [3 * i + 1 for i in range(1, 20_000, 7)]  # between the rowids of every range, read or not
    past = list(range(60_001, 65_001))  # after the last rowid when the plan began
    with closing(sqlite3.connect(db)) as con, con:
        con.executemany("INSERT INTO t VALUES (?, ?, 0.5)", [(i, f"new {i}") for i in inside + past])
    again = run(args)
    assert again.returncode == 0, again.stderr
    ids = pq.read_table(out, columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a row was copied twice"
    assert {3 * i for i in range(1, 20_001)} <= set(ids), "a row the table held at the kill was lost"
    assert not set(past) & set(ids), "a row inserted after the plan's last key was read: the run is not bounded"
    # the rows inserted inside the first batch's ranges, committed before the inserts, are the only ones left out
    committed_keys = sorted(3 * i for i in range(1, 20_001))[:first]
    assert {i for i in inside if i > committed_keys[-1]} <= set(ids)
