"""Copies from a real PostgreSQL, checked against the rows the test inserted: exact on both servers, through a
storm of SIGKILLs, at one instant while writers run, across a killed backend, and refused in one line where it
must be (a wrong password, a missing privilege, a column added between a kill and the re-run, another server
behind the re-run); and verify names the rows that differ."""

from __future__ import annotations

import contextlib
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.connectors.postgres.conftest import cli_options, expected_events, make_events
from tests.fixtures import ROOT, PostgresServer
from tests.splitsource.copyjob.kill_points import ENGINE_POINTS
from tests.splitsource.copyjob.test_copy import CLI, _polled_rows, kill_and_rerun, kill_at

pytestmark = pytest.mark.slow


def _copy(server: PostgresServer, args: list[str], env: dict[str, str] | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "copy", *args], capture_output=True, text=True, timeout=timeout,
                          env=env or server.run_env())


def _rows(out: Path, *columns: str) -> list[tuple[object, ...]]:
    table = pq.read_table(out, columns=list(columns))
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def test_a_copy_is_exact_and_verifies(postgres: PostgresServer, table_name: str, tmp_path: Path) -> None:
    make_events(postgres, table_name, 20_000)
    out = tmp_path / "out"
    done = _copy(postgres, [*cli_options(postgres, table_name, split_size_mb="0.3"), "--output", str(out),
                            "--engine", "local", "--quiet"])
    assert done.returncode == 0, done.stderr
    rows = _rows(out, "id", "name", "score", "flag")
    truth = expected_events(20_000)
    assert sorted(r[0] for r in rows) == list(truth)
    assert all(truth[r[0]] == r[1:] for r in rows)  # type: ignore[index]
    verified = subprocess.run([*CLI, "verify", *cli_options(postgres, table_name), "--output", str(out)],
                              capture_output=True, text=True, env=postgres.run_env(), timeout=300)
    assert verified.returncode == 0 and verified.stdout.startswith("MATCH"), verified.stdout + verified.stderr
    secret = postgres.env["PGPASSWORD"]
    for path in (*tmp_path.rglob("*"),):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the password is in {path}"


@pytest.mark.parametrize("split_by,engine", [("key", "local"), ("blocks", "local"), ("key", "spark")])
def test_a_sigkill_storm_ends_exact(postgres15: PostgresServer, table_name: str, tmp_path: Path,
                                    split_by: str, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILLs of the copy (ten of the local engine at every named point, two of Spark where its tasks read), each
    at a named point of the batch after a commit."""
    make_events(postgres15, table_name, 60_000)
    monkeypatch.setenv("PGPASSWORD", postgres15.env["PGPASSWORD"])
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this environment's
    out = tmp_path / "out"
    # more batches than kills: each killed run commits one batch and is held in its next
    split_mb = "0.04" if engine == "local" else "0.1"
    args = ["copy", *cli_options(postgres15, table_name, split_size_mb=split_mb, page_rows="500", split_by=split_by),
            "--output", str(out), "--engine", engine, *(["--workers", "2"] if engine == "local" else []),
            "--max-splits-per-batch", "2", "--quiet"]
    # a Spark engine's second kill takes the coordinator alone: its JVM and Python workers find out themselves
    if engine == "local":
        kill_and_rerun(args, out, kills=10, seed=7)
    else:
        kill_and_rerun(args, out, kills=2, seed=7, coordinator_alone=lambda kill: kill == 1, points=ENGINE_POINTS)
    ids = [r[0] for r in _rows(out, "id")]
    assert sorted(ids) == list(range(1, 60_001))


@contextlib.contextmanager
def _transfers(server: PostgresServer, table_name: str, accounts: int) -> Iterator[list[int]]:
    """``accounts`` accounts of 1,000 each, and two writers that move balance between two of them, delete one and
    insert another in each transaction, until the block ends: at every instant the table holds ``accounts``
    accounts and ``accounts * 1000`` in all, and a copy that mixed instants would not. Yields the count of writer
    transactions committed so far."""
    with server.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name}")
        conn.execute(f"CREATE TABLE {table_name} (id int8 PRIMARY KEY, balance int8, pad text)")
        conn.execute(f"INSERT INTO {table_name} SELECT i, 1000, repeat('x', 200) FROM generate_series(1, {accounts}) i")
    stop = threading.Event()
    transactions = [0]

    def write(seed: int) -> None:
        import psycopg

        rng = random.Random(seed)
        next_id = 1_000_000 * (seed + 1)
        with server.connect() as conn:
            while not stop.is_set():
                try:
                    with conn.transaction():
                        a, b = conn.execute(f"SELECT id FROM {table_name} ORDER BY random() LIMIT 2").fetchall()
                        moved = [conn.execute(f"UPDATE {table_name} SET balance = balance - 7 WHERE id = %s",
                                              a).rowcount,
                                 conn.execute(f"UPDATE {table_name} SET balance = balance + 7 WHERE id = %s",
                                              b).rowcount]
                        if moved != [1, 1]:  # the other writer deleted one of them since the SELECT
                            raise TypeError("roll back: a half transfer would not keep the total")
                        gone = conn.execute(f"DELETE FROM {table_name} WHERE id = %s RETURNING balance",
                                            (rng.choice([a[0], b[0]]),)).fetchone()
                        next_id += 1
                        conn.execute(f"INSERT INTO {table_name} VALUES (%s, %s, repeat('y', {rng.randint(0, 400)}))",
                                     (next_id, gone[0]))
                    transactions[0] += 1
                except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure, TypeError):
                    pass  # two writers on one row (a deadlock, or a row the other deleted): rolled back whole

    writers = [threading.Thread(target=write, args=(i,), daemon=True) for i in range(2)]
    for w in writers:
        w.start()
    try:
        yield transactions
    finally:
        stop.set()
        for w in writers:
            w.join(30)


# a reader's page: the driver describes the SELECT, then runs it as COPY (SELECT ...) TO STDOUT, which is what the
# session shows between its pages
_READER = ("application_name = 'splitsource' AND (query LIKE '%%SELECT%%ORDER BY%%LIMIT%%' "
           "OR query LIKE '%%SELECT%%ctid%%')")


def _terminate_readers(server: PostgresServer, table_name: str, proc: subprocess.Popen[str], times: int) -> int:
    """Terminates reader sessions of the copy ``proc`` until ``times`` distinct ones are gone, however fast the
    machine: the first once they have read a page (mid-split), then each new session, which a queued ``LOCK TABLE
    ... IN ACCESS EXCLUSIVE MODE`` holds at its first page (never granted: a session of the test's holds ACCESS
    SHARE on the table to the end, and queued behind it, the lock stops every new reader). The lock's session is
    terminated after, the holder's transaction ended, and the copy goes on. Returns how many sessions were
    terminated: ``times`` or more, since one query may end several."""
    import psycopg

    deadline = time.monotonic() + 120
    ended: list[BaseException] = []  # how the lock's wait ended: its session terminated, at the end
    with server.connect() as admin:
        def rows(sql: str, *args: object) -> list[tuple[object, ...]]:
            while not (found := admin.execute(sql, args).fetchall()):
                assert not ended, f"the lock's wait ended before its session was terminated: {ended[0]}"
                assert proc.poll() is None, f"the copy ended before {times} readers were terminated"
                assert time.monotonic() < deadline, f"fewer than {times} reader sessions to terminate in 120 s"
                time.sleep(0.01)
            return found

        rows(f"SELECT pid FROM pg_stat_activity WHERE {_READER}")  # a reader has read a page: it is mid-split
        holder, locker = server.connect(), server.connect()
        holder.execute("BEGIN")  # holds ACCESS SHARE to the end: the lock queued behind it is never granted
        holder.execute(f"SELECT 1 FROM {table_name} LIMIT 0")
        locker_pid = locker.info.backend_pid
        # a writer that holds the table and waits behind the lock makes a cycle; the session whose deadlock_timeout
        # runs out first checks it and, where it cannot reorder the queue, ends its own wait: never the lock's
        locker.execute("SET deadlock_timeout = '10min'")

        def lock() -> None:
            try:
                with locker.transaction():
                    locker.execute(f"LOCK TABLE {table_name} IN ACCESS EXCLUSIVE MODE")
            except psycopg.OperationalError as exc:  # its session terminated below
                ended.append(exc)

        waiting = threading.Thread(target=lock, daemon=True)
        waiting.start()
        try:
            rows("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", locker_pid)
            gone: set[object] = set()
            while len(gone) < times:
                found = rows(f"SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE {_READER} "
                             "AND pid <> ALL(%s)", list(gone))
                gone.update(pid for pid, done in found if done)
        finally:
            admin.execute("SELECT pg_terminate_backend(%s)", (locker_pid,))
            waiting.join(30)
            locker.close()
            holder.execute("ROLLBACK")
            holder.close()
        assert ended, "the lock was granted, and no reader was stopped by it"
        assert not isinstance(ended[0], psycopg.errors.DeadlockDetected), ended[0]
    return len(gone)


def _one_instant(out: Path, accounts: int) -> None:
    rows = _rows(out, "id", "balance")
    assert len(rows) == accounts and len({r[0] for r in rows}) == accounts
    assert sum(r[1] for r in rows) == accounts * 1000  # type: ignore[misc]


def test_one_instant_while_writers_run(postgres15: PostgresServer, table_name: str, tmp_path: Path) -> None:
    """Writers move balance between accounts while the copy runs (:func:`_transfers`): the copy is one instant."""
    with _transfers(postgres15, table_name, 5000) as transactions:
        out = tmp_path / "out"
        before = transactions[0]
        done = _copy(postgres15, [*cli_options(postgres15, table_name, split_size_mb="0.05", page_rows="100"),
                                  "--output", str(out), "--engine", "local", "--workers", "2",
                                  "--max-splits-per-batch", "2", "--quiet"])
        during = transactions[0] - before
    assert done.returncode == 0, done.stderr
    assert during > 50, f"only {during} writer transactions ran during the copy: the test proves nothing"
    _one_instant(out, 5000)


def test_readers_terminated_while_writers_run_stay_at_the_runs_instant(postgres15: PostgresServer, table_name: str,
                                                                        tmp_path: Path) -> None:
    """pg_terminate_backend on the readers' sessions, again and again, while writers run: each reader connects
    again and imports the run's snapshot, which its exporting session still holds, so the copy is still one instant
    and no reader reports the snapshot lost (a failure to import it that is not the server saying it is gone is
    retried, never taken for a lost snapshot). Three sessions are terminated however fast the machine
    (:func:`_terminate_readers`); the copy is slowed (--max-rows-per-second: 10 s at least) so that the writers run
    during it."""
    accounts = 20_000
    with _transfers(postgres15, table_name, accounts) as transactions:
        out = tmp_path / "out"
        before = transactions[0]
        proc = subprocess.Popen([*CLI, "copy", *cli_options(postgres15, table_name, split_size_mb="0.3",
                                                              page_rows="200", split_by="key"),
                                 "--output", str(out), "--engine", "local", "--workers", "2",
                                 "--max-rows-per-second", "2000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=postgres15.run_env())
        terminated = _terminate_readers(postgres15, table_name, proc, 3)
        stdout, stderr = proc.communicate(timeout=300)
        during = transactions[0] - before
    assert proc.returncode == 0, stderr
    assert terminated >= 3  # one query may end both readers at once
    assert during > 50, f"only {during} writer transactions ran during the copy: the test proves nothing"
    resumed = re.search(r"readers: (\d+) transient errors? resumed", stdout)
    assert resumed and int(resumed.group(1)) >= 1, f"no reader met a termination: {stdout}"
    assert "snapshot_lost" not in stdout, f"a reader took a terminated session for a lost snapshot: {stdout}"
    _one_instant(out, accounts)


def test_a_killed_backend_resumes_mid_split(postgres15: PostgresServer, table_name: str, tmp_path: Path) -> None:
    """pg_terminate_backend on reader sessions, three of them (:func:`_terminate_readers`): the readers connect
    again, import the run's snapshot and resume their splits; every row once."""
    make_events(postgres15, table_name, 40_000)
    out = tmp_path / "out"
    proc = subprocess.Popen([*CLI, "copy", *cli_options(postgres15, table_name, split_size_mb="0.2",
                                                          page_rows="200"),
                             "--output", str(out), "--engine", "local", "--workers", "2", "--quiet",
                             "--max-rows-per-second", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=postgres15.run_env())
    assert _terminate_readers(postgres15, table_name, proc, 3) >= 3  # one query may end both readers at once
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert sorted(r[0] for r in _rows(out, "id")) == list(range(1, 40_001))


class _CommitFailed(Exception):
    """A batch's commit that fails: the copy raises it to its caller."""


@pytest.mark.parametrize("ends", ["done", "failed"])
def test_a_copy_in_python_leaves_no_session_on_the_server_once_it_returns(
        postgres15: PostgresServer, table_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        ends: str) -> None:
    """``copy()`` in a process that goes on (a notebook, a scheduler): once it returns, or raises, no session of it
    holds the table. The plan's session, idle in its transaction, would hold back the server's vacuum and keep the
    table from being altered until the process's next copy."""
    from splitsource import copy
    from splitsource.copyjob import _coordinator

    make_events(postgres15, table_name, 4000)
    monkeypatch.setenv("PGPASSWORD", postgres15.env["PGPASSWORD"])
    # several key ranges: the plan reads a sample of the table's keys, in its transaction
    source = {"dsn": postgres15.dsn, "table": table_name, "split_size_mb": "0.1"}
    if ends == "failed":
        def fail(self: object, *args: object) -> None:
            raise _CommitFailed()

        monkeypatch.setattr(_coordinator._Coordinator, "commit", fail)
        with pytest.raises(_CommitFailed):
            copy("postgres", source, str(tmp_path / "out"), engine="local", workers=1, progress=None)
    else:
        assert copy("postgres", source, str(tmp_path / "out"), engine="local", workers=1, progress=None).rows == 4000

    def holders() -> list[tuple[object, ...]]:
        with postgres15.connect() as conn:
            return conn.execute("SELECT a.pid, a.state, a.backend_xmin::text FROM pg_locks l JOIN pg_stat_activity a "
                                "USING (pid) WHERE l.relation = %s::regclass", (table_name,)).fetchall()

    deadline, held = time.monotonic() + 10, holders()
    while held and time.monotonic() < deadline:  # a closed session's backend ends a moment later
        time.sleep(0.05)
        held = holders()
    assert held == [], f"sessions of the copy still hold {table_name}: {held}"


def test_wrong_password_and_missing_privilege_are_one_line(postgres15: PostgresServer, table_name: str,
                                                           tmp_path: Path) -> None:
    make_events(postgres15, table_name, 100)
    with postgres15.connect() as conn:
        conn.execute("DROP ROLE IF EXISTS nobody_reads")
        conn.execute("CREATE ROLE nobody_reads LOGIN PASSWORD 'secret-nr'")
    wrong = _copy(postgres15, [*cli_options(postgres15, table_name), "--output", str(tmp_path / "a")],
                  env={**postgres15.run_env(), "PGPASSWORD": "not-the-password"})
    assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
    assert "password authentication failed" in wrong.stderr and "not-the-password" not in wrong.stderr
    dsn = postgres15.dsn.replace("user=postgres", "user=nobody_reads")
    denied = _copy(postgres15, ["--connector", "postgres", "-o", f"dsn={dsn}", "-o", f"table={table_name}",
                                "--output", str(tmp_path / "b")],
                   env={**postgres15.run_env(), "PGPASSWORD": "secret-nr"})
    assert denied.returncode == 2 and len(denied.stderr.strip().splitlines()) == 1, denied.stderr
    assert "permission denied" in denied.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing claimed


def test_a_where_the_server_cannot_run_and_a_table_it_does_not_hold_are_one_line(
        postgres15: PostgresServer, table_name: str, tmp_path: Path) -> None:
    """A bad value of option ``where`` or ``table`` (none such, a view, or no name) is refused with exit 2, in one
    line with the server's words, before anything is claimed; a condition that fails only on a row fails the copy
    (exit 1) in one line too, the driver's query and caret in the error log; and no condition runs more than
    itself."""
    make_events(postgres15, table_name, 100)
    cases = {"syntax": ("name = = 1", 'syntax error at or near "="'),
             "column": ("nope > 1", 'column "nope" does not exist'),
             "type": ("id > 'x'", 'invalid input syntax for type bigint: "x"'),
             "constant": ("1/0 = 1", "division by zero"),
             "two statements": (f"id > 0); DROP TABLE {table_name}; SELECT (1",
                                "cannot insert multiple commands into a prepared statement")}
    for name, (where, words) in cases.items():
        out = tmp_path / name.replace(" ", "-")
        done = _copy(postgres15, [*cli_options(postgres15, table_name, where=where), "--output", str(out),
                                  "--engine", "local"])
        expected = f"splitsource copy: option 'where': PostgreSQL refuses {where!r} on public.{table_name}: {words}"
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [expected], done.stderr
        assert not list(tmp_path.glob(f"{out.name}*")), f"{name}: the copy claimed its output"
    with postgres15.connect() as conn:  # the two statements ran neither
        assert conn.execute(f"SELECT count(*) FROM {table_name}").fetchone() == (100,)
    missing = _copy(postgres15, [*cli_options(postgres15, "public.no_such_table"), "--output", str(tmp_path / "m")])
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "splitsource copy: option 'table': no table public.no_such_table in this database (as the login sees it)"]
    with postgres15.connect() as conn:  # failed on the readers' "column ctid does not exist", exit 1
        conn.execute(f"CREATE OR REPLACE VIEW {table_name}_v AS SELECT * FROM {table_name}")
        conn.execute(f"CREATE SEQUENCE IF NOT EXISTS {table_name}_s")
    for relation, kind in ((f"{table_name}_v", "a view"), (f"{table_name}_s", "a sequence")):
        refused = _copy(postgres15, [*cli_options(postgres15, relation), "--output", str(tmp_path / "v")])
        assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
            f"splitsource copy: option 'table': public.{relation} is {kind}, which has no rows of its own to split "
            "by key or block: give a table, a partitioned table or a materialized view (of it, say)"], refused.stderr
        assert not list(tmp_path.glob("v*"))
    named = _copy(postgres15, [*cli_options(postgres15, f"{table_name}; DROP TABLE {table_name}"), "--output",
                               str(tmp_path / "n")])
    assert named.returncode == 2 and named.stderr.strip().splitlines() == [
        f"splitsource copy: option 'table': PostgreSQL cannot take '{table_name}; DROP TABLE {table_name}' for a "
        "table's name: invalid name syntax"], named.stderr
    on_a_row = _copy(postgres15, [*cli_options(postgres15, table_name, where="1 / (id - 50) <> 0"), "--output",
                                  str(tmp_path / "row"), "--engine", "local", "--quiet"])
    log = tmp_path / "row.checkpoint" / "splitsource-copy-error.log"
    assert on_a_row.returncode == 1 and on_a_row.stderr.strip().splitlines() == [
        "splitsource copy: reading split(s) range-0 failed: [libpq] Execution error [PGRES_FATAL_ERROR]: ERROR:  "
        f"division by zero (details: {log})"], on_a_row.stderr
    assert "division by zero" in log.read_text() and "Traceback" in log.read_text()


def test_a_partitioned_table_with_a_foreign_partition_is_refused(postgres15: PostgresServer, table_name: str,
                                                                  tmp_path: Path) -> None:
    """A partition that is a foreign table (postgres_fdw, here back to the same server) has no blocks, no snapshot
    and no transaction ids of this server: its rows were left out of every block range, and the copy said
    "copy finished: 1,000 rows" of 1,100."""
    with postgres15.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
        conn.execute(f"DROP TABLE IF EXISTS {table_name}, {table_name}_remote CASCADE")
        conn.execute("DROP SERVER IF EXISTS splitsource_loop CASCADE")
        conn.execute(f"CREATE SERVER splitsource_loop FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', "
                     f"port '{postgres15.env['PGPORT']}', dbname 'postgres')")
        conn.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER splitsource_loop OPTIONS (user 'postgres', "
                     f"password '{postgres15.env['PGPASSWORD']}')")
        conn.execute(f"CREATE TABLE {table_name}_remote (id int NOT NULL, v int)")
        conn.execute(f"INSERT INTO {table_name}_remote SELECT i, i FROM generate_series(1001, 1100) i")
        conn.execute(f"CREATE TABLE {table_name} (id int NOT NULL, v int) PARTITION BY RANGE (id)")
        conn.execute(f"CREATE TABLE {table_name}_near PARTITION OF {table_name} FOR VALUES FROM (1) TO (1001)")
        conn.execute(f"CREATE FOREIGN TABLE {table_name}_far PARTITION OF {table_name} FOR VALUES FROM (1001) TO "
                     f"(2001) SERVER splitsource_loop OPTIONS (table_name '{table_name}_remote')")
        conn.execute(f"INSERT INTO {table_name}_near SELECT i, i FROM generate_series(1, 1000) i")
        assert conn.execute(f"SELECT count(*) FROM {table_name}").fetchone() == (1100,)
    done = _copy(postgres15, [*cli_options(postgres15, table_name), "--output", str(tmp_path / "out"),
                              "--engine", "local"])
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"splitsource copy: option 'table': public.{table_name} has a foreign table among its partitions "
        f"({table_name}_far), whose rows are another server's: give its other partitions, each as a table"
    ], done.stderr
    assert not list(tmp_path.glob("out*"))
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE {table_name}, {table_name}_remote CASCADE")
        conn.execute("DROP SERVER splitsource_loop CASCADE")


def test_a_table_others_inherit_from_is_refused(postgres15: PostgresServer, table_name: str, tmp_path: Path) -> None:
    """A read of an inheritance parent holds its children's rows, whose ids its primary key does not keep apart from
    its own: key ranges resumed after an id shared by two rows (3,750 rows of 4,000 at page_rows=7, "copy finished"),
    and a block range held both tables' rows of its blocks (a page over its limit)."""
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table_name} CASCADE")
        conn.execute(f"CREATE TABLE {table_name} (id int PRIMARY KEY, v int)")
        conn.execute(f"CREATE TABLE {table_name}_child (extra int) INHERITS ({table_name})")
        conn.execute(f"INSERT INTO {table_name} SELECT i, i FROM generate_series(1, 1000) i")
        conn.execute(f"INSERT INTO {table_name}_child (id, v) SELECT i, -i FROM generate_series(1, 3000) i")
    for split_by in ("key", "blocks"):
        done = _copy(postgres15, [*cli_options(postgres15, table_name, split_by=split_by, page_rows="7"),
                                  "--output", str(tmp_path / split_by), "--engine", "local"])
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [
            f"splitsource copy: option 'table': tables inherit from public.{table_name} ({table_name}_child), and a "
            "read of it holds their rows too, which its key does not keep apart from its own: copy each of them"
        ], done.stderr
        assert not list(tmp_path.glob(f"{split_by}*"))
    with postgres15.connect() as conn:
        conn.execute(f"DROP TABLE {table_name} CASCADE")


def _killed_after_a_commit(server: PostgresServer, args: list[str], out: Path) -> None:
    """Run ``splitsource copy args`` and SIGKILL it once it has committed a batch into ``out`` (held where its
    second batch is planned)."""
    kill_at(["copy", *args], "planned", env=server.run_env())
    assert _polled_rows(out) > 0


def test_a_column_added_between_a_kill_and_the_rerun_is_refused(postgres15: PostgresServer, table_name: str,
                                                                tmp_path: Path) -> None:
    make_events(postgres15, table_name, 30_000)
    out = tmp_path / "out"
    args = [*cli_options(postgres15, table_name, split_size_mb="0.1"), "--output", str(out), "--engine", "local",
            "--max-splits-per-batch", "1", "--quiet"]
    _killed_after_a_commit(postgres15, args, out)
    with postgres15.connect() as conn:
        conn.execute(f"ALTER TABLE {table_name} ADD COLUMN extra int")
    again = _copy(postgres15, args)
    assert again.returncode != 0 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "belongs to another copy" in again.stderr and "shape" in again.stderr, again.stderr


def test_a_server_restarted_mid_copy_is_waited_for_and_the_copy_ends_exact(postgres15: PostgresServer,
                                                                           table_name: str, tmp_path: Path) -> None:
    """``pg_ctl restart -m immediate`` (a crash and recovery) while the copy runs: a reader reading at that instant
    retries, and its snapshot is gone with the server, so the readers go on at a new one, in their key ranges
    after the last key read; every row once."""
    make_events(postgres15, table_name, 40_000)
    out = tmp_path / "out"
    proc = subprocess.Popen([*CLI, "copy", *cli_options(postgres15, table_name, split_size_mb="0.2",
                                                          page_rows="200", split_by="key"),
                             "--output", str(out), "--engine", "local", "--workers", "2", "--max-splits-per-batch",
                             "2", "--max-rows-per-second", "4000"],  # slow on purpose: running at the restart
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=postgres15.run_env())
    deadline = time.monotonic() + 120
    while _polled_rows(out) <= 0:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no commit within 120 s"
        time.sleep(0.02)
    restarted = subprocess.run([sys.executable, "scripts/postgres.py", "restart", "--immediate", "--dir",
                                str(postgres15.root)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert restarted.returncode == 0, restarted.stderr
    assert proc.poll() is None, f"the copy ended (exit {proc.returncode}) at the restart: {proc.communicate()[1]}"
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    resumed = re.search(r"readers: (\d+) transient errors? resumed", stdout)
    lost = re.search(r"snapshot_lost (\d+)", stdout)
    # a reader reading at the instant retries (a transient error), one starting after it finds the snapshot gone
    assert resumed and (int(resumed.group(1)) > 0 or lost), f"no reader met the restart: {stdout}"
    assert sorted(r[0] for r in _rows(out, "id")) == list(range(1, 40_001))


def test_a_rerun_against_another_server_is_refused(postgres15: PostgresServer, postgres18: PostgresServer,
                                                   table_name: str, tmp_path: Path) -> None:
    """The same table, with the same rows, on another server: the checkpoint records the server it read (its
    system identifier), so the re-run refuses instead of mixing two servers' rows in one output."""
    for server in (postgres15, postgres18):
        make_events(server, table_name, 30_000)
    out = tmp_path / "out"

    def args(server: PostgresServer) -> list[str]:
        return [*cli_options(server, table_name, split_size_mb="0.1"), "--output", str(out), "--engine", "local",
                "--max-splits-per-batch", "1", "--quiet"]

    _killed_after_a_commit(postgres15, args(postgres15), out)
    committed = _polled_rows(out)
    other = _copy(postgres18, args(postgres18))
    assert other.returncode != 0 and len(other.stderr.strip().splitlines()) == 1, other.stderr
    assert "system_identifier" in other.stderr and "mix two sources" in other.stderr, other.stderr
    assert _polled_rows(out) == committed  # nothing of the other server's
    again = _copy(postgres15, args(postgres15))
    assert again.returncode == 0, again.stderr
    assert sorted(r[0] for r in _rows(out, "id")) == list(range(1, 30_001))


def test_verify_names_the_rows_that_differ_by_key(postgres15: PostgresServer, table_name: str,
                                                  tmp_path: Path) -> None:
    """A row changed and a row deleted in the source after the copy: verify says MISMATCH and names both by key,
    with the changed column's two values."""
    make_events(postgres15, table_name, 5_000)
    out = tmp_path / "out"
    done = _copy(postgres15, [*cli_options(postgres15, table_name), "--output", str(out), "--quiet"])
    assert done.returncode == 0, done.stderr
    with postgres15.connect() as conn:
        conn.execute(f"UPDATE {table_name} SET name = 'renamed' WHERE id = 1234")
        conn.execute(f"DELETE FROM {table_name} WHERE id = 4321")
    verified = subprocess.run([*CLI, "verify", *cli_options(postgres15, table_name), "--output", str(out)],
                              capture_output=True, text=True, env=postgres15.run_env(), timeout=300)
    assert verified.returncode != 0 and verified.stdout.startswith("MISMATCH"), verified.stdout + verified.stderr
    lines = [line.strip() for line in verified.stdout.splitlines()]
    assert any(line.startswith("""key id=1234: column 'name': source "renamed", output "name 1234" (""")
               for line in lines), verified.stdout
    assert any(line.startswith("key id=4321: in the output, not in the source (") for line in lines), verified.stdout
