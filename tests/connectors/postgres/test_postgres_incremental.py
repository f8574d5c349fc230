"""Incremental copies of a real PostgreSQL (15 and 18): each run after the first copies the row versions the last run's
snapshot could not see, so a transaction that began before a run and committed after it (in a savepoint too), rows
that share a cursor value across a run's end, and rows frozen by VACUUM FREEZE all reach the output. The truth is the
table as the test reads it with psycopg after each run; the output is read with the query docs/incremental.md gives
(DuckDB), and verified."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from splitsource.sink import parse_sink_options
from tests.connectors.postgres.conftest import cli_options, make_events
from tests.fixtures import PostgresServer, polars_table
from tests.splitsource.copyjob.kill_points import ENGINE_POINTS
from tests.splitsource.copyjob.test_copy import CLI, kill_and_rerun, kill_at

pytestmark = pytest.mark.slow

# docs/incremental.md's query: each key's newest version, deletes left out
NEWEST = """
SELECT * EXCLUDE (_splitsource_run, _splitsource_change)
FROM (SELECT * FROM read_parquet('{out}/**/*.parquet')
      QUALIFY row_number() OVER (PARTITION BY id ORDER BY _splitsource_run DESC) = 1)
WHERE _splitsource_change = 'upsert'
"""


def _copy(server: PostgresServer, table: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [*CLI, "copy", *cli_options(server, table, split_size_mb="0.2"), "--output", str(out), "--incremental",
            "--engine", "local", "--workers", "2", "--quiet", *extra]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=server.run_env())
    assert done.returncode == 0, done.stderr
    return done


def _truth(server: PostgresServer, table: str) -> list[tuple[Any, ...]]:
    with server.connect() as conn:
        return [tuple(r) for r in conn.execute(f"SELECT id, name, score FROM {table} ORDER BY id").fetchall()]


def _newest(out: Path) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in duckdb.sql(f"SELECT id, name, score FROM ({NEWEST.format(out=out)}) ORDER BY id")
            .fetchall()]


def _run_ids(out: Path, run: int) -> list[int]:
    return [r[0] for r in duckdb.sql(f"SELECT id FROM read_parquet('{out}/**/*.parquet') WHERE _splitsource_run = "
                                     f"{run} AND _splitsource_change = 'upsert' ORDER BY id").fetchall()]


def _verify(server: PostgresServer, table: str, out: Path) -> None:
    verified = subprocess.run([*CLI, "verify", *cli_options(server, table), "--output", str(out)],
                              capture_output=True, text=True, env=server.run_env(), timeout=300)
    assert verified.returncode == 0 and verified.stdout.startswith("MATCH"), verified.stdout + verified.stderr


def test_late_commits_in_savepoints_too_reach_the_next_run(postgres: PostgresServer, table_name: str,
                                                           tmp_path: Path) -> None:
    make_events(postgres, table_name, 3000)
    out = tmp_path / "out"
    with postgres.connect() as late, postgres.connect() as nested:
        # began before run 1, committed after it: a low id inserted and an old row updated...
        late.execute("BEGIN")
        late.execute(f"INSERT INTO {table_name} (id, name, score) VALUES (0, 'late', -1)")
        late.execute(f"UPDATE {table_name} SET name = 'late update' WHERE id = 5")
        # ...and the same inside a savepoint, as nested ORM transactions make (a subtransaction id of its own)
        nested.execute("BEGIN")
        nested.execute("SAVEPOINT orm")
        nested.execute(f"INSERT INTO {table_name} (id, name, score) VALUES (-1, 'nested', -2)")
        nested.execute(f"UPDATE {table_name} SET name = 'nested update' WHERE id = 6")
        nested.execute("RELEASE SAVEPOINT orm")
        first = _copy(postgres, table_name, out)
        assert first.stdout.startswith("run 1 of an incremental copy, at xmin="), first.stdout
        assert _newest(out) == _truth(postgres, table_name)  # neither transaction is seen yet
        late.execute("COMMIT")
        nested.execute("COMMIT")
    second = _copy(postgres, table_name, out)
    headline = second.stdout.splitlines()[0]
    assert "2 rows inserted, 2 updated and 0 deleted (by key) since run 1" in headline, second.stdout
    assert _run_ids(out, 2) == [-1, 0, 5, 6]
    assert _newest(out) == _truth(postgres, table_name)
    _verify(postgres, table_name, out)


def test_a_cursor_value_across_a_runs_end_freezing_and_a_run_with_nothing_new(postgres15: PostgresServer,
                                                                              table_name: str, tmp_path: Path) -> None:
    """1,000 rows get one updated_at value in two transactions, one committed before run 1 and one after: a cursor
    of updated_at > last value would lose the second's. Then rows added after run 2 are frozen by VACUUM FREEZE
    before run 3 (their xmin kept), and old frozen rows are updated."""
    server = postgres15
    make_events(server, table_name, 5000)
    out = tmp_path / "out"
    stamp = "timestamptz '2026-11-28 12:00:00+00'"
    with server.connect() as conn, server.connect() as slow:
        conn.execute(f"UPDATE {table_name} SET at = {stamp} WHERE id <= 500")
        slow.execute("BEGIN")
        slow.execute(f"UPDATE {table_name} SET at = {stamp}, name = 'straddle' WHERE id > 4500")
        _copy(server, table_name, out)
        slow.execute("COMMIT")
    _copy(server, table_name, out)
    assert _run_ids(out, 2) == list(range(4501, 5001))
    with server.connect() as conn:
        conn.execute(f"INSERT INTO {table_name} (id, name, score) SELECT i, 'new', i "
                     "FROM generate_series(5001, 5100) i")
        conn.execute(f"VACUUM FREEZE {table_name}")
        frozen = conn.execute(f"SELECT count(*) FROM {table_name} WHERE id > 5000 AND xmin::text::int8 > 2").fetchone()
        assert frozen[0] == 100  # a frozen row keeps its xmin (PostgreSQL 9.4 on): what the run selects by
        conn.execute(f"UPDATE {table_name} SET score = -score WHERE id IN (1, 2, 3)")
    third = _copy(server, table_name, out)
    assert _run_ids(out, 3) == [1, 2, 3, *range(5001, 5101)], third.stdout
    assert _newest(out) == _truth(server, table_name)
    files = sorted(p.name for p in out.rglob("*.parquet"))
    scans = _scans(server, table_name)
    with server.connect() as conn:
        started = conn.execute("SELECT now()").fetchone()[0]
    nothing = _copy(server, table_name, out)
    assert nothing.stdout.startswith("run 4: nothing changed since run 3 (xmin="), nothing.stdout
    # the table's change counters are run 3's: the run read neither the changed rows nor the keys
    assert _scans(server, table_name, started) == scans
    assert "nothing committed" in nothing.stdout and len(nothing.stdout.strip().splitlines()) == 1
    assert sorted(p.name for p in out.rglob("*.parquet")) == files
    _verify(server, table_name, out)


def _scans(server: PostgresServer, table: str, since: Any = None) -> tuple[int, int]:
    """The table's sequential and index scans so far, once the counts of the sessions begun after ``since`` (a
    copy's) are in: a session publishes them as it ends, and the copy's may still be ending when it exits."""
    with server.connect() as conn:
        deadline = time.monotonic() + 30
        while since is not None and conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND pid <> pg_backend_pid() AND backend_start >= %s", (since,)).fetchone()[0]:
            assert time.monotonic() < deadline, "another session is still open"
            time.sleep(0.05)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        found = conn.execute("SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_user_tables "
                             "WHERE relid = %s::regclass", (table,)).fetchone()
        return int(found[0]), int(found[1])


@pytest.fixture()
def writers(postgres15: PostgresServer, table_name: str) -> Iterator[Callable[[], threading.Event]]:
    """Starts two writers, which write until the event it returns is set: updates of random rows and inserts of new
    ids, some in savepoints, some in transactions that stay open across a run's start."""
    stop = threading.Event()
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def write(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with postgres15.connect() as conn:
                while not stop.is_set():
                    conn.execute("BEGIN")
                    for _ in range(rng.randint(1, 20)):
                        if rng.random() < 0.3:
                            conn.execute("SAVEPOINT s")
                        key = rng.randint(1, 20_000)
                        conn.execute(f"UPDATE {table_name} SET score = score + 1, name = %s WHERE id = %s",
                                     (f"w{seed}", key))
                        conn.execute(f"INSERT INTO {table_name} (id, name, score) VALUES (%s, 'ins', 0) "
                                     "ON CONFLICT (id) DO NOTHING", (rng.randint(20_001, 40_000),))
                    stop.wait(rng.random() * 0.2)  # open while a run may start
                    conn.execute("COMMIT")
        except BaseException as exc:  # noqa: BLE001 -- the test reports it
            errors.append(exc)

    def start() -> threading.Event:
        threads.extend(threading.Thread(target=write, args=(seed,), name=f"writer-{seed}", daemon=True)
                       for seed in (1, 2))
        for t in threads:
            t.start()
        return stop

    yield start
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors


def test_ten_runs_under_writers_end_equal_to_the_table(postgres15: PostgresServer, table_name: str, tmp_path: Path,
                                                       writers: Callable[[], threading.Event]) -> None:
    make_events(postgres15, table_name, 20_000)
    out = tmp_path / "out"
    stop = writers()
    for _ in range(9):
        _copy(postgres15, table_name, out)
    stop.set()  # the writers stop; the tenth run reads what the ninth's snapshot could not see
    for t in threading.enumerate():  # the writers' last transactions ended
        if t.name.startswith("writer"):
            t.join(timeout=30)
    tenth = _copy(postgres15, table_name, out)
    assert tenth.stdout.startswith("run 10 of an incremental copy"), tenth.stdout
    # a run may find the table's change counters as the last run left them (the writers' backends publish them
    # about once a second) and read nothing, handing its instant on; eight runs under writers cannot all do so
    wrote = [run for run in range(2, 10) if _run_ids(out, run)]
    assert len(wrote) >= 2, f"only runs {wrote} of 2 to 9 read the writers' changes: the test proved little"
    assert _newest(out) == _truth(postgres15, table_name)
    _verify(postgres15, table_name, out)


def test_a_spark_run_reads_the_changed_rows_its_plan_hands_it(postgres15: PostgresServer, table_name: str,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the Spark engine too, run 2 plans one split, whose reader is handed the changed rows its plan read (the
    copy hands its tasks the reader options as it hands the local engine's workers), and lands exactly what
    changed: a late commit, an insert and a delete among it."""
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    server = postgres15
    make_events(server, table_name, 3000)
    out = tmp_path / "out"
    args = [*CLI, "copy", *cli_options(server, table_name, split_size_mb="0.05"), "--output", str(out),
            "--incremental", "--engine", "spark"]

    def run() -> str:
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=server.run_env())
        assert done.returncode == 0, done.stderr
        return done.stdout

    with server.connect() as late:
        late.execute("BEGIN")
        late.execute(f"UPDATE {table_name} SET name = 'late' WHERE id = 7")
        assert "splits" in run() and _newest(out) == _truth(server, table_name) != []
        late.execute("COMMIT")
    with server.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET score = -score WHERE id % 100 = 0")
        conn.execute(f"INSERT INTO {table_name} (id, name, score) VALUES (3001, 'new', 1)")
        conn.execute(f"DELETE FROM {table_name} WHERE id = 1")
    second = run()
    assert "1 row inserted, 31 updated and 1 deleted" in second and ", 1 split" in second, second
    assert _run_ids(out, 2) == sorted([7, 3001, *range(100, 3001, 100)])
    assert _newest(out) == _truth(server, table_name)


# the local engine kills at every named point, the Spark engine where its tasks read (kill_points.ENGINE_POINTS),
# twice: its storm at every point is the generator's (tests/splitsource/copyjob/test_incremental.py)
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_kill_storm_inside_an_incremental_run_ends_exact(postgres15: PostgresServer, table_name: str,
                                                           tmp_path: Path, engine: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", postgres15.env["PGPASSWORD"])
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    make_events(postgres15, table_name, 40_000)
    out = tmp_path / "out"
    split_mb = "0.06" if engine == "local" else "0.15"  # a Spark job a batch: fewer of them
    # scanned for the changed rows (tid_rows=0), in key ranges: a run of one range handed its rows has one batch
    args = ["copy", *cli_options(postgres15, table_name, split_size_mb=split_mb, page_rows="500", tid_rows="0"),
            "--output", str(out),
            "--engine", engine, *(["--workers", "2"] if engine == "local" else []), "--max-splits-per-batch", "2",
            "--incremental", "--quiet"]
    assert subprocess.run([*CLI, *args], capture_output=True, timeout=300).returncode == 0
    with postgres15.connect() as conn:  # every other row changes: run 2 reads in many batches; some odd ones go
        conn.execute(f"UPDATE {table_name} SET name = 'changed', score = -score WHERE id % 2 = 0")
        conn.execute(f"DELETE FROM {table_name} WHERE id % 14 = 7")
    if engine == "local":
        final = kill_and_rerun(args, out, kills=4, seed=54)
    else:
        final = kill_and_rerun(args, out, kills=2, seed=54, coordinator_alone=lambda kill: kill == 1,
                               points=ENGINE_POINTS)
    assert final.startswith("run 2 of an incremental copy"), final
    assert "0 rows inserted, 20,000 updated and 2,857 deleted (by key)" in final, final
    assert _run_ids(out, 2) == list(range(2, 40_001, 2))
    assert _newest(out) == _truth(postgres15, table_name)


def test_a_column_added_since_the_last_run_is_refused_by_name(postgres15: PostgresServer, table_name: str,
                                                              tmp_path: Path) -> None:
    make_events(postgres15, table_name, 1000)
    out = tmp_path / "out"
    _copy(postgres15, table_name, out)
    with postgres15.connect() as conn:
        conn.execute(f"ALTER TABLE {table_name} ADD COLUMN region text")
    again = subprocess.run([*CLI, "copy", *cli_options(postgres15, table_name), "--output", str(out),
                            "--incremental", "--engine", "local"], capture_output=True, text=True, timeout=300,
                           env=postgres15.run_env())
    assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "the source's columns changed since this copy started (region added)" in again.stderr, again.stderr


def test_a_key_changed_since_the_last_run_is_refused_naming_both(postgres15: PostgresServer, table_name: str,
                                                                 tmp_path: Path) -> None:
    """A table keyed by a unique index whose key becomes (id, at): the files' rows were applied by id, so the next
    run is refused, where it went on and the newest row of each id dropped every other row of that id."""
    make_events(postgres15, table_name, 100)
    with postgres15.connect() as conn:
        conn.execute(f"ALTER TABLE {table_name} DROP CONSTRAINT {table_name}_pkey, ALTER COLUMN id SET NOT NULL, "
                     "ALTER COLUMN at SET NOT NULL")
        conn.execute(f"CREATE UNIQUE INDEX {table_name}_id ON {table_name} (id)")
    out = tmp_path / "out"
    _copy(postgres15, table_name, out)
    with postgres15.connect() as conn:
        conn.execute(f"DROP INDEX {table_name}_id")
        conn.execute(f"CREATE UNIQUE INDEX {table_name}_id_at ON {table_name} (id, at)")
        conn.execute(f"INSERT INTO {table_name} (id, name, at) VALUES (1, 'again', '2030-01-01')")
    again = subprocess.run([*CLI, "copy", *cli_options(postgres15, table_name), "--output", str(out),
                            "--incremental", "--engine", "local"], capture_output=True, text=True, timeout=300,
                           env=postgres15.run_env())
    assert again.returncode == 1, again.stderr
    assert again.stderr == ("splitsource copy: the source's key changed since this copy started, from (id) to "
                            "(id, at): each run applies its rows by the key, and the output's rows were applied "
                            "by the first; copy to a new path\n")
    assert _run_ids(out, 2) == []


@pytest.mark.usefixtures("pyiceberg_planner")
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_each_run_is_applied_to_a_table_by_key(postgres15: PostgresServer, table_name: str, tmp_path: Path,
                                               fmt: str) -> None:
    """Into Delta (delta-rs's merge) and Iceberg (pyiceberg: the old versions deleted in the commit that adds the
    new): after each run the table, read by delta-rs or pyiceberg through Polars, and by DuckDB for Delta, is the
    table PostgreSQL holds; a late commit included, and a run with nothing new makes no table commit."""
    server = postgres15
    make_events(server, table_name, 4000)
    out = tmp_path / "table"
    with server.connect() as late:
        late.execute("BEGIN")
        late.execute(f"UPDATE {table_name} SET name = 'late' WHERE id IN (7, 3001)")
        _copy(server, table_name, out, "--table-format", fmt)
        late.execute("COMMIT")
    with server.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET score = -score WHERE id % 50 = 0")
        conn.execute(f"INSERT INTO {table_name} (id, name, score) VALUES (4001, 'new', 1), (0, 'low', 2)")
    second = _copy(server, table_name, out, "--table-format", fmt)
    assert "2 rows inserted, 82 updated and 0 deleted (by key) since run 1" in second.stdout, \
        second.stdout

    def table_rows() -> list[tuple[Any, ...]]:
        frame = polars_table(out, fmt).sort("id")
        return list(zip(*(frame[c].to_list() for c in ("id", "name", "score")), strict=True))

    assert table_rows() == _truth(server, table_name)
    committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
    assert committer.table is not None
    versions = len(committer.table.history(committer))
    nothing = _copy(server, table_name, out, "--table-format", fmt)
    assert "nothing committed" in nothing.stdout
    assert len(committer.table.history(committer)) == versions
    assert table_rows() == _truth(server, table_name)
    _verify(server, table_name, out)


def _rows_of(out: Path, output: str) -> list[tuple[Any, ...]]:
    """What a reader of the output sees: the files' newest versions (docs/incremental.md's query, DuckDB), or the
    table (Polars, through delta-rs or pyiceberg)."""
    if output == "parquet":
        return _newest(out)
    frame = polars_table(out, output).sort("id")
    return list(zip(*(frame[c].to_list() for c in ("id", "name", "score")), strict=True))


@pytest.mark.usefixtures("pyiceberg_planner")
@pytest.mark.parametrize("output", ["parquet", "delta", "iceberg"])
def test_deleted_rows_leave_the_output_in_their_run(postgres: PostgresServer, table_name: str, tmp_path: Path,
                                                    output: str) -> None:
    """Rows deleted between runs leave the output in the next run (files: a delete row each, which the newest-version
    query drops; tables: in the run's one commit), found by a key-only scan in the run's snapshot; a key deleted and
    inserted again is a changed row, and a run whose only change is a delete commits it."""
    server = postgres
    make_events(server, table_name, 3000)
    out = tmp_path / "out"
    extra = [] if output == "parquet" else ["--table-format", output]
    _copy(server, table_name, out, *extra)
    with server.connect() as conn:
        conn.execute(f"DELETE FROM {table_name} WHERE id % 100 = 0 OR id = 1")
        conn.execute(f"UPDATE {table_name} SET name = 'kept' WHERE id = 2")
    second = _copy(server, table_name, out, *extra)
    assert "0 rows inserted, 1 updated and 31 deleted (by key) since run 1" in second.stdout, second.stdout
    assert _rows_of(out, output) == _truth(server, table_name)
    if output == "parquet":  # run 2's rows: the update, and the deletes as rows of their own
        assert duckdb.sql(f"SELECT _splitsource_change, count(*), min(id) FROM read_parquet('{out}/**/*.parquet') "
                          "WHERE _splitsource_run = 2 GROUP BY ALL ORDER BY 1").fetchall() == \
            [("delete", 31, 1), ("upsert", 1, 2)]
    with server.connect() as conn:
        conn.execute(f"INSERT INTO {table_name} (id, name, score) VALUES (100, 'back', 1)")
        conn.execute(f"DELETE FROM {table_name} WHERE id = 3")
    third = _copy(server, table_name, out, *extra)
    assert "1 row inserted, 0 updated and 1 deleted (by key) since run 2" in third.stdout, third.stdout
    with server.connect() as conn:
        conn.execute(f"DELETE FROM {table_name} WHERE id = 4")
    fourth = _copy(server, table_name, out, *extra)
    assert "0 rows inserted, 0 updated and 1 deleted (by key) since run 3" in fourth.stdout, fourth.stdout
    assert _rows_of(out, output) == _truth(server, table_name)
    nothing = _copy(server, table_name, out, *extra)
    assert nothing.stdout.startswith("run 5: nothing changed since run 4"), nothing.stdout
    _verify(server, table_name, out)
    if output == "parquet":  # --no-deletes leaves a deleted key in the output; the next run with deletes finds it
        with server.connect() as conn:
            conn.execute(f"DELETE FROM {table_name} WHERE id = 5")
        left = _copy(server, table_name, out, "--no-deletes")
        assert left.stdout.startswith("run 6: nothing changed since run 5"), left.stdout
        assert 5 in [r[0] for r in _newest(out)]
        found = _copy(server, table_name, out)
        assert "0 rows inserted, 0 updated and 1 deleted (by key) since run 6" in found.stdout, found.stdout
        assert _newest(out) == _truth(server, table_name)


def test_a_key_the_columns_leave_out_is_refused_before_the_first_run(postgres15: PostgresServer, table_name: str,
                                                                     tmp_path: Path) -> None:
    """Each run after the first applies its rows by the key: a read without it is refused at once, naming the column,
    before a full copy the next run could not build on (it failed there with a KeyError, exit 1)."""
    make_events(postgres15, table_name, 10)
    out = tmp_path / "out"
    done = subprocess.run([*CLI, "copy", *cli_options(postgres15, table_name, columns="name,score"), "--output",
                           str(out), "--incremental", "--engine", "local"], capture_output=True, text=True,
                          timeout=300, env=postgres15.run_env())
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("splitsource copy: --incremental applies each run's rows by the source's key (id), but the "
                           "columns read leave out id: read it too (option 'columns')\n")
    assert not out.exists() and not Path(f"{out}.checkpoint").exists()


def test_a_table_without_a_key_and_a_partitioned_table_output_are_refused_in_one_line(postgres15: PostgresServer,
                                                                          table_name: str, tmp_path: Path) -> None:
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (id int8, name text)")
    for extra, words in ((["--output", str(tmp_path / "a")], "--incremental needs a key to apply a changed row by"),
                         (["--output", str(tmp_path / "b"), "--table-format", "delta", "--bucketer", "columns",
                           "--sink-option", "bucket_columns=name"], None),
                         (["--output", str(tmp_path / "c"), "--bucketer", "columns", "--sink-option",
                           "bucket_columns=id"], "--incremental: the key column 'id' is a bucket column, which the "
                                                 "files leave out")):
        if words is None:
            make_events(postgres15, table_name, 10)
            words = "--incremental into a delta table applies each run's rows by key, into a table without partitions"
        done = subprocess.run([*CLI, "copy", *cli_options(postgres15, table_name), *extra, "--incremental",
                               "--engine", "local"], capture_output=True, text=True, timeout=300,
                              env=postgres15.run_env())
        assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr


class _DiedAfterTheTableCommit(BaseException):
    """What a kill right after the table's commit, before the sink marks its commit done, leaves."""


@pytest.mark.usefixtures("pyiceberg_planner")
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_run_that_died_after_its_table_commit_is_not_applied_twice(postgres15: PostgresServer, table_name: str,
                                                                     tmp_path: Path, fmt: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from splitsource import copy
    from splitsource.sink import _committer

    server = postgres15
    make_events(server, table_name, 2000)
    out = tmp_path / "table"
    monkeypatch.setenv("PGPASSWORD", server.env["PGPASSWORD"])
    source = {"dsn": server.dsn, "table": table_name}
    copy("postgres", source, str(out), engine="local", workers=1, incremental=True, progress=None,
         sink_options={"table_format": fmt})
    with server.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET score = score + 1000 WHERE id <= 10")
        conn.execute(f"DELETE FROM {table_name} WHERE id > 1995")
    published = _committer.publish
    commits: list[int] = []

    def publish_then_die(committer: Any, records: Any, deletes: Any = None) -> bool:
        made = published(committer, records, deletes)
        commits.append(records[-1].seq)
        if made:
            raise _DiedAfterTheTableCommit()
        return made

    monkeypatch.setattr(_committer, "publish", publish_then_die)
    with pytest.raises(_DiedAfterTheTableCommit):
        copy("postgres", source, str(out), engine="local", workers=1, incremental=True, progress=None,
             sink_options={"table_format": fmt})
    summary = copy("postgres", source, str(out), engine="local", workers=1, incremental=True, progress=None,
                   sink_options={"table_format": fmt})
    assert (summary.run, summary.run_rows, summary.updated, summary.deleted) == (2, 10, 10, 5) and \
        commits[0] == commits[1], \
        (summary, commits)
    frame = polars_table(out, fmt).sort("id")
    assert list(zip(*(frame[c].to_list() for c in ("id", "name", "score")), strict=True)) == _truth(server, table_name)
    committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
    assert committer.table is not None
    tagged = [c.seq for c in committer.table.history(committer) if c.seq == commits[0]]
    assert len(tagged) == (1 if fmt == "delta" else 2), tagged  # Iceberg's: the delete's snapshot and the append's


class _DiedBeforeTheCommit(BaseException):
    """What a kill after a batch's files are written, before the batch is committed, leaves."""


def test_a_run_handed_its_rows_that_died_before_its_commit_reads_again_at_a_new_instant(
        postgres15: PostgresServer, table_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose reader is handed the changed rows its plan read (one range, in one batch) dies with the batch
    written and not committed; the re-run replays the logged batch with no rows (they were the dead run's
    snapshot's): its reader scans the range at a new instant, and the output is the table, a change made in
    between included."""
    from connectors.postgres._reader import handed_rows
    from splitsource import _offsets, copy
    from splitsource.copyjob import _coordinator

    server = postgres15
    make_events(server, table_name, 3000)
    out = tmp_path / "out"
    monkeypatch.setenv("PGPASSWORD", server.env["PGPASSWORD"])
    source = {"dsn": server.dsn, "table": table_name, "split_size_mb": "0.05"}
    copy("postgres", source, str(out), engine="local", workers=2, incremental=True, progress=None)
    with server.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET name = 'changed' WHERE id % 10 = 0")
        conn.execute(f"DELETE FROM {table_name} WHERE id % 100 = 1")
    handed: list[dict[str, str]] = []
    commit, write = _coordinator._Coordinator.commit, _coordinator._Coordinator.write

    def written(self: Any, batch: Any) -> Any:
        handed.append(dict(batch.task.read.connector))
        return write(self, batch)

    def die(self: Any, *args: Any) -> None:
        raise _DiedBeforeTheCommit()

    monkeypatch.setattr(_coordinator._Coordinator, "write", written)
    monkeypatch.setattr(_coordinator._Coordinator, "commit", die)
    with pytest.raises(_DiedBeforeTheCommit):
        copy("postgres", source, str(out), engine="local", workers=2, incremental=True, progress=None)
    assert len(handed) == 1 and handed_rows(handed[0]["rows"]).num_rows == 300, "the run was not handed its rows"
    assert _offsets._LIVE._key is None, "the dead run's enumerator, and its snapshot, outlived it"
    with server.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET name = 'later' WHERE id IN (5, 10)")
    monkeypatch.setattr(_coordinator._Coordinator, "commit", commit)
    summary = copy("postgres", source, str(out), engine="local", workers=2, incremental=True, progress=None)
    assert len(handed) == 2 and "rows" not in handed[-1] and "snapshot" not in handed[-1], handed[-1].keys()
    assert (summary.run, summary.deleted) == (2, 30), summary
    assert _newest(out) == _truth(server, table_name)


class _DiedAfterTheDeletes(BaseException):
    """What a kill right after a run's delete rows are committed to files, before the run is marked finished,
    leaves."""


def test_a_run_that_died_after_committing_its_deletes_does_not_write_them_twice(
        postgres15: PostgresServer, table_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from splitsource import copy
    from splitsource.copyjob._deletes import RunDeletes

    server = postgres15
    make_events(server, table_name, 2000)
    out = tmp_path / "out"
    monkeypatch.setenv("PGPASSWORD", server.env["PGPASSWORD"])
    source = {"dsn": server.dsn, "table": table_name}
    copy("postgres", source, str(out), engine="local", workers=1, incremental=True, progress=None)
    with server.connect() as conn:
        conn.execute(f"DELETE FROM {table_name} WHERE id % 100 = 0")
    committed = RunDeletes.commit_to_files

    def commit_then_die(self: RunDeletes, query_id: str, writer: str, deleted: Any) -> int:
        if committed(self, query_id, writer, deleted):
            raise _DiedAfterTheDeletes()
        return 0

    monkeypatch.setattr(RunDeletes, "commit_to_files", commit_then_die)
    with pytest.raises(_DiedAfterTheDeletes):
        copy("postgres", source, str(out), engine="local", workers=1, incremental=True, progress=None)
    summary = copy("postgres", source, str(out), engine="local", workers=1, incremental=True, progress=None)
    assert summary.run == 2 and summary.deleted == 20, summary
    deletes = duckdb.sql(f"SELECT count(*), count(DISTINCT id) FROM read_parquet('{out}/**/*.parquet') "
                         "WHERE _splitsource_change = 'delete'").fetchall()
    assert deletes == [(20, 20)], deletes
    assert _newest(out) == _truth(server, table_name)


class _DiedBeforeItsMarker(BaseException):
    """What a kill after a run kept the output's keys, before its finished marker names them, leaves."""


@pytest.mark.parametrize("output", ["parquet", "delta"])
def test_the_next_run_reads_the_keys_the_last_one_kept_not_the_output(
        postgres15: PostgresServer, table_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        output: str) -> None:
    """A run with deletes keeps the keys the output holds after it in the checkpoint (``keys-run<N>.arrow``, which
    its finished marker names): the next run reads them, not the output, and finds every delete; a run that changes
    no key names the file the one before did; a run killed after writing its file, before its marker, is re-run
    exact and the older file goes; a run with --no-deletes keeps none, so the next one reads the output. A run's
    deleted keys stay in the checkpoint until it is marked finished, no longer."""
    import json

    from splitsource import copy
    from splitsource.copyjob import _job
    from splitsource.copyjob._deletes import RunDeletes

    server = postgres15
    make_events(server, table_name, 3000)
    out, checkpoint = tmp_path / "out", tmp_path / "out.checkpoint"
    monkeypatch.setenv("PGPASSWORD", server.env["PGPASSWORD"])
    source = {"dsn": server.dsn, "table": table_name}
    sink = {} if output == "parquet" else {"table_format": output}
    read_output: list[int] = []  # the runs that found no keys kept, and read the output's
    read_held = RunDeletes._read_held

    def held_or_output(self: RunDeletes) -> None:
        read_held(self)
        if self._held is None:
            read_output.append(self.run)

    monkeypatch.setattr(RunDeletes, "_read_held", held_or_output)

    def run(*, deletes: bool = True) -> Any:
        read_output.clear()
        return copy("postgres", source, str(out), engine="local", workers=1, incremental=True, progress=None,
                    sink_options=sink, deletes=deletes)

    def marker() -> dict[str, Any]:
        held: dict[str, Any] = json.loads((checkpoint / "finished.json").read_text())["held"]
        return held

    def kept() -> list[str]:
        return sorted(p.name for p in checkpoint.glob("keys-run*.arrow"))

    def deleted() -> list[str]:
        return sorted(p.name for p in checkpoint.glob("deleted-run*"))

    def change(*statements: str) -> int:
        """Run ``statements``; the rows they deleted."""
        with server.connect() as conn:
            done = [(s, conn.execute(s.format(table=table_name)).rowcount) for s in statements]
        return sum(n for s, n in done if s.startswith("DELETE"))

    run()
    assert marker() == {} and kept() == []  # run 1, a full copy: no delete looked for
    gone = change("DELETE FROM {table} WHERE id % 100 = 0",
                  "INSERT INTO {table} (id, name, score) VALUES (5000, 'new', 1)")
    assert (run().deleted, marker()["keys"], kept()) == (gone, "keys-run2.arrow", ["keys-run2.arrow"])
    assert deleted() == []
    assert read_output == [2]  # run 1 kept no keys
    change("UPDATE {table} SET name = 'changed' WHERE id % 7 = 0", "DELETE FROM {table} WHERE id = 7")
    assert (run().deleted, marker()["keys"], read_output) == (1, "keys-run3.arrow", [])
    change("UPDATE {table} SET name = 'again' WHERE id % 11 = 0")
    fourth = run()
    assert (fourth.deleted, marker()["keys"], read_output) == (0, "keys-run3.arrow", []), fourth  # no key changed
    assert _rows_of(out, output) == _truth(server, table_name)

    gone = change("DELETE FROM {table} WHERE id % 13 = 0",
                  "INSERT INTO {table} (id, name, score) VALUES (5001, 'new', 2)")
    finished = _job.mark_finished

    def die(*args: Any) -> None:
        raise _DiedBeforeItsMarker()

    monkeypatch.setattr(_job, "mark_finished", die)
    with pytest.raises(_DiedBeforeItsMarker):
        run()
    assert (marker()["keys"], kept()) == ("keys-run3.arrow", ["keys-run3.arrow", "keys-run5.arrow"])
    assert deleted() == ["deleted-run5-applied.parquet", "deleted-run5.parquet"]  # the re-run applies them
    monkeypatch.setattr(_job, "mark_finished", finished)
    summary = run()
    assert (summary.run, summary.deleted, summary.inserted) == (5, gone, 1), summary
    assert (marker()["keys"], kept(), read_output, deleted()) == ("keys-run5.arrow", ["keys-run5.arrow"], [], [])
    assert _rows_of(out, output) == _truth(server, table_name)

    change("DELETE FROM {table} WHERE id = 2")
    run(deletes=False)
    assert (marker(), kept()) == ({}, [])  # the output keeps a key the source lost: no keys kept
    change("DELETE FROM {table} WHERE id = 3")
    assert (run().deleted, read_output) == (2, [7])  # run 6 kept none: run 7 reads the output
    assert _rows_of(out, output) == _truth(server, table_name)


@pytest.mark.usefixtures("pyiceberg_planner")
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_run_lands_in_its_table_whole_in_one_commit(postgres15: PostgresServer, table_name: str, tmp_path: Path,
                                                      fmt: str) -> None:
    """A run of many batches, killed with some of them committed to the output's log, has changed nothing a reader
    of the table sees; the run resumed lands whole, as one table commit (Iceberg's: one transaction, the old
    versions' delete and the new files' append)."""
    server = postgres15
    make_events(server, table_name, 20_000)
    out = tmp_path / "table"
    args = ["copy", *cli_options(server, table_name, split_size_mb="0.06", page_rows="500", tid_rows="0"),
            "--output", str(out), "--engine", "local", "--workers", "2", "--max-splits-per-batch", "1",
            "--incremental", "--quiet",
            "--table-format", fmt]
    assert subprocess.run([*CLI, *args], capture_output=True, timeout=300, env=server.run_env()).returncode == 0
    committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
    assert committer.table is not None
    run_1 = _truth(server, table_name)

    def table_rows() -> list[tuple[Any, ...]]:
        frame = polars_table(out, fmt).sort("id")
        return list(zip(*(frame[c].to_list() for c in ("id", "name", "score")), strict=True))

    assert table_rows() == run_1 and len(committer.table.history(committer)) == 1  # run 1: one commit too
    with server.connect() as conn:  # every ranges' rows change: run 2 reads in many batches
        conn.execute(f"UPDATE {table_name} SET name = 'changed', score = -score WHERE id % 3 = 0")
    kill_at(args, "planned", env=server.run_env())  # held at its second batch, the first committed to the log
    assert [r for r, _ in committer.records() if r.kind == "stream" and r.write_id.endswith("-run2")], \
        "run 2 committed no batch before the kill: the test proves nothing"
    assert table_rows() == run_1 and len(committer.table.history(committer)) == 1, "the table shows run 2 in part"
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=server.run_env())
    assert done.returncode == 0, done.stderr
    assert table_rows() == _truth(server, table_name)
    snapshots = committer.table.history(committer)[1:]
    assert len(snapshots) == (1 if fmt == "delta" else 2), snapshots
    assert len({c.seq for c in snapshots}) == 1  # tagged with the run's newest commit record
    _verify(server, table_name, out)
