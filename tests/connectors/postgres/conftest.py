"""Shared helpers of the PostgreSQL tests: tables whose every value the test knows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures import PostgresServer


def options(server: PostgresServer, table: str, **extra: str) -> dict[str, str]:
    """The connector's options for ``table`` on ``server`` (the password comes through PGPASSWORD)."""
    return {"dsn": server.dsn, "password": server.env["PGPASSWORD"], "table": table, **extra}


def cli_options(server: PostgresServer, table: str, **extra: str) -> list[str]:
    """The same as ``splitsource copy`` arguments, without the password (the copy reads PGPASSWORD)."""
    pairs = {"dsn": server.dsn, "table": table, **extra}
    return ["--connector", "postgres", *[a for k, v in pairs.items() for a in ("-o", f"{k}={v}")]]


def make_events(server: PostgresServer, table: str, rows: int) -> None:
    """``table``: ``rows`` rows of an int8 key and values computed from it, so a test knows each one."""
    with server.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id int8 PRIMARY KEY, name text, score float8, at timestamptz, "
                     "flag bool, amount numeric)")
        conn.execute(f"INSERT INTO {table} SELECT i, CASE WHEN i % 10 = 0 THEN NULL ELSE 'name ' || i END, i * 0.5, "
                     "timestamptz '2026-01-01 00:00:00+00' + i * interval '1 second', i % 3 = 0, i / 7.0 "
                     f"FROM generate_series(1, {rows}) i")
        conn.execute(f"ANALYZE {table}")


def expected_events(rows: int) -> dict[int, tuple[Any, ...]]:
    """The rows ``make_events`` inserted, by id, computed in Python: (name, score, flag)."""
    return {i: (None if i % 10 == 0 else f"name {i}", i * 0.5, i % 3 == 0) for i in range(1, rows + 1)}


@pytest.fixture()
def table_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A table name of this test's own."""
    yield "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
