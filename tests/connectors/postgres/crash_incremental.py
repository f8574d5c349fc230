"""What the incremental crash test records: two incremental runs of a PostgreSQL table into Parquet files, the
second after rows were deleted, updated and inserted, with the storage door traced
(:mod:`tests.splitsource.crashfs`), the read tasks run in this process (``crash_scenarios.InlineEngine``).

The second run writes every file an incremental run adds to a copy's: the deletes it found at its first plan
(``deleted-run2.parquet``), those less its own keys (``deleted-run2-applied.parquet``), its delete rows' commit,
the keys the output holds after it (``keys-run2.arrow``) and its finished marker, which names them.

``python -m tests.connectors.postgres.crash_incremental ROOT TRACE TABLE DSN`` records it under ROOT into TRACE in a
process of its own (the password in ``PGPASSWORD``), so that the lock it leaves names a process that is gone, as
after a power loss.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any

ROWS = 120
# what happens to the table between the runs: keys deleted, rows updated, rows inserted (all known to the test)
CHANGES = (
    "DELETE FROM {t} WHERE id % 10 = 3",
    "UPDATE {t} SET name = 'changed ' || id WHERE id % 10 = 5",
    f"INSERT INTO {{t}} SELECT i, 'new ' || i FROM generate_series({ROWS + 1}, {ROWS + 15}) i",
)


def make_table(conn: Any, table: str) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id int8 PRIMARY KEY, name text)")
    conn.execute(f"INSERT INTO {table} SELECT i, 'name ' || i FROM generate_series(1, {ROWS}) i")


def copy_once(root: Path, table: str, dsn: str, password: str) -> Any:
    """One incremental run of ``table`` into ``root/out`` (Parquet), its tasks in this process."""
    from splitsource import copy
    from tests.splitsource.crash_scenarios import InlineEngine

    options = {"dsn": dsn, "table": table, "password": password}
    return copy("postgres", options, str(root / "out"), engine=InlineEngine("local"), incremental=True)


def record(root: Path, table: str, dsn: str) -> list[tuple[Any, ...]]:
    """Both runs under ``root`` with the door traced; marked ``run1`` after the first (the table then changes) and
    ``returned`` after the second."""
    import psycopg

    from splitsource import _fs
    from tests.splitsource.crashfs import Recorder

    password = os.environ["PGPASSWORD"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, table)
    recorder = Recorder(root)
    _fs.set_tracer(recorder)
    try:
        copy_once(root, table, dsn, password)
        recorder.mark("run1")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for change in CHANGES:
                conn.execute(change.format(t=table))
            conn.execute("SELECT pg_stat_force_next_flush()")  # counted before the next run looks
        copy_once(root, table, dsn, password)
        recorder.mark("returned")
    finally:
        _fs.set_tracer(None)
    return recorder.ops


def main(argv: list[str]) -> int:
    root, trace, table, dsn = argv
    Path(trace).write_bytes(pickle.dumps(record(Path(root), table, dsn)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
