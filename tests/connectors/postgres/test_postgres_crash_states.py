"""Power loss during an incremental run: every state a crash could leave while a PostgreSQL copy's second run
finds and applies its deletes, and keeps the output's keys for the next run, ends with the files equal to the
table once the same run is started again, and so does the run after it, which reads the keys that run kept (the
states: :mod:`tests.splitsource.crashfs`; the runs: :mod:`tests.connectors.postgres.crash_incremental`).

The keys file is synced before the marker names it, and a run that finds the named file gone or torn reads the
output's keys instead: with both taken out, 28 of the states went wrong (by hand, 2026-12-02)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from splitsource._errors import SplitSourceError
from splitsource._names import APPLIED_SUFFIX, DELETED_PREFIX, DELETED_SUFFIX, KEYS_PREFIX, KEYS_SUFFIX
from tests.connectors.postgres import crash_incremental as ci
from tests.connectors.postgres.test_postgres_incremental import NEWEST
from tests.fixtures import ROOT, PostgresServer
from tests.splitsource.crashfs import CrashState
from tests.splitsource.test_crash_states import _replay, states_dir  # noqa: F401 - states_dir: a fixture

pytestmark = pytest.mark.slow

KEYS = f"{KEYS_PREFIX}2{KEYS_SUFFIX}"
FOUND = f"{DELETED_PREFIX}2{DELETED_SUFFIX}"
APPLIED = f"{DELETED_PREFIX}2{APPLIED_SUFFIX}"


def _newest(out: Path) -> list[tuple[Any, ...]]:
    """The output's rows as docs/incremental.md's query reads them (DuckDB): each key's newest, deletes left out."""
    return [tuple(r) for r in duckdb.sql(f"SELECT id, name FROM ({NEWEST.format(out=out)}) ORDER BY id").fetchall()]


def _check(state: CrashState, root: Path, server: PostgresServer, table: str, truth: list[tuple[Any, ...]]) -> str:
    """The same run started again after ``state``, then one more after a change: "exact" or "refused: <line>", or
    an AssertionError saying what is wrong."""
    out = root / "out"
    if "returned" in state.marks:
        assert _newest(out) == truth, "a run that had finished lost its changes to the power loss"
    try:
        ci.copy_once(root, table, server.dsn, server.env["PGPASSWORD"])
    except SplitSourceError as exc:
        assert "\n" not in str(exc), f"a refusal of more than one line: {exc}"
        return f"refused: {exc}"
    assert _newest(out) == truth, "the run started again did not end equal to the table"
    # the next run, after a delete and an update, reads what this one kept (the keys file, or the output where the
    # crash tore that file); the table is put back after it, for the next state
    with server.connect() as conn:
        conn.execute(f"DELETE FROM {table} WHERE id = 1")
        conn.execute(f"UPDATE {table} SET name = 'again' WHERE id = 2")
    try:
        ci.copy_once(root, table, server.dsn, server.env["PGPASSWORD"])
        assert _newest(out) == [(2, "again") if i == 2 else (i, n) for i, n in truth if i != 1], \
            "the next run did not end equal to the table"
    finally:
        with server.connect() as conn:
            conn.execute(f"INSERT INTO {table} VALUES (1, 'name 1')")
            conn.execute(f"UPDATE {table} SET name = 'name 2' WHERE id = 2")
    return "exact"


def _readable(data: bytes | None) -> bool:
    try:
        pa.ipc.open_file(pa.py_buffer(data or b"")).read_all()
        return True
    except pa.ArrowInvalid:
        return False


def test_every_crash_state_of_an_incremental_run_ends_exact(postgres15: PostgresServer, table_name: str,
                                                            states_dir: Path,  # noqa: F811 - the fixture
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    root, trace = states_dir / "incremental", states_dir / "incremental.trace"
    subprocess.run([sys.executable, "-m", "tests.connectors.postgres.crash_incremental", str(root), str(trace),
                    table_name, postgres15.dsn], check=True, cwd=ROOT, timeout=300, env=postgres15.run_env())
    ops: list[tuple[Any, ...]] = pickle.loads(trace.read_bytes())
    with postgres15.connect() as conn:  # the table as the test changed it, read by the test
        truth = [tuple(r) for r in conn.execute(f"SELECT id, name FROM {table_name} ORDER BY id").fetchall()]
    expected = {i: f"name {i}" for i in range(1, ci.ROWS + 1) if i % 10 != 3}
    expected |= {i: f"changed {i}" for i in expected if i % 10 == 5} | {i: f"new {i}" for i in
                                                                         range(ci.ROWS + 1, ci.ROWS + 16)}
    assert truth == sorted(expected.items())

    held: Counter[str] = Counter()  # what the crash left of the files the second run adds

    def check(state: CrashState, built: Path) -> str:
        names = {path.rsplit("/", 1)[-1]: data for path, data in state.files.items()}
        held.update(name for name in (FOUND, APPLIED) if names.get(name) is not None)
        if KEYS in names:
            held["keys file " + ("whole" if _readable(names[KEYS]) else "torn or empty")] += 1
        return _check(state, built, postgres15, table_name, truth)

    outcomes, failures = _replay("incremental", ops, root, start=ops.index(("mark", "run1")), check=check)
    with capsys.disabled():
        print(f"\nincremental crash states: {sum(outcomes.values())}, "
              + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
              + "; " + ", ".join(f"{k} in {v}" for k, v in sorted(held.items())))
    assert sum(outcomes.values()) >= 100
    # the crashes fell on every file the run adds, the keys file torn as well as whole
    assert {FOUND, APPLIED, "keys file whole", "keys file torn or empty"} <= set(held), held
    assert not failures, f"{len(failures)} crash state(s) not exact:\n" + "\n".join(t for _, t in failures[:20])
