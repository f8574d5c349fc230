"""The benchmark table: 1,000,000 rows of about 200 bytes with mixed types, loaded once into a local Cassandra.

Shared by ``bench_cassandra.py`` and ``bench_tools.py``. Loading is idempotent: a table that already holds the
requested row count (recorded in ``bench.loaded``) is reused, so repeated benchmark runs measure reads only.

    python bench/cassandra_table.py --rows 1000000      # start the local node if needed, load, flush
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KEYSPACE = "bench"
TABLE = "rows"
HOSTS = os.environ.get("CASSANDRA_HOSTS", "127.0.0.1")
DDL = (
    f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{TABLE} (id bigint PRIMARY KEY, name text, email text, score double, "
    "visits int, active boolean, created timestamp, tag uuid, payload blob)"
)
COLUMNS = "id, name, email, score, visits, active, created, tag, payload"
EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)


def row(i: int) -> tuple[Any, ...]:
    """Row ``i``: about 200 bytes on the wire (two short strings, a 64-byte blob, six fixed-width values)."""
    return (
        i,
        f"user-{i:010d}-{'abcdefgh'[i % 8] * (i % 9)}",
        f"user{i}@example-{i % 97}.com",
        i * 0.25,
        i % 100_000,
        i % 3 == 0,
        EPOCH + timedelta(seconds=i),
        uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % (1 << 128)),
        (i.to_bytes(8, "big") * 8),
    )


def session() -> tuple[Any, Any]:
    from cassandra.cluster import Cluster

    cluster = Cluster(HOSTS.split(","), protocol_version=5)
    return cluster, cluster.connect()


def _load_slice(bounds: tuple[int, int]) -> int:
    from cassandra.concurrent import execute_concurrent_with_args

    cluster, s = session()
    try:
        insert = s.prepare(f"INSERT INTO {KEYSPACE}.{TABLE} ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        start, stop = bounds
        for chunk in range(start, stop, 20_000):
            args = [row(i) for i in range(chunk, min(chunk + 20_000, stop))]
            execute_concurrent_with_args(s, insert, args, concurrency=96, raise_on_first_error=True)
        return stop - start
    finally:
        cluster.shutdown()


def loaded_rows() -> int:
    cluster, s = session()
    try:
        s.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                  "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        s.execute(DDL)
        s.execute(f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.loaded (name text PRIMARY KEY, rows bigint)")
        found = s.execute(f"SELECT rows FROM {KEYSPACE}.loaded WHERE name = %s", (TABLE,)).one()
        return int(found[0]) if found else 0
    finally:
        cluster.shutdown()


def ensure_loaded(rows: int, cassandra_dir: Path | None = None) -> None:
    """Load rows ``0..rows`` unless that many are recorded as loaded; then flush so reads hit SSTables."""
    if loaded_rows() == rows:
        return
    cluster, s = session()
    s.execute(f"TRUNCATE {KEYSPACE}.{TABLE}")
    cluster.shutdown()
    started = time.monotonic()
    workers = 2
    step = -(-rows // workers)
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        done = sum(pool.map(_load_slice, [(a, min(a + step, rows)) for a in range(0, rows, step)]))
    print(f"loaded {done:,} rows in {time.monotonic() - started:.0f} s", file=sys.stderr)
    if cassandra_dir is not None:
        from scripts.cassandra import nodetool

        nodetool(cassandra_dir, 1, "flush", KEYSPACE)
        nodetool(cassandra_dir, 1, "refreshsizeestimates")
    cluster, s = session()
    s.execute(f"INSERT INTO {KEYSPACE}.loaded (name, rows) VALUES (%s, %s)", (TABLE, rows))
    cluster.shutdown()


def ensure_cassandra() -> Path:
    """The local node of scripts/cassandra.py, started (kept if already running)."""
    from scripts.cassandra import DEFAULT_DIR, cql_up, start

    if not cql_up("127.0.0.1", 9042):
        start(DEFAULT_DIR, nodes=1, num_tokens=16, heap_mb=2048)
    return DEFAULT_DIR


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    ensure_loaded(args.rows, ensure_cassandra())
    return 0


if __name__ == "__main__":
    sys.exit(main())
