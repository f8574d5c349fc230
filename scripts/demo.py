#!/usr/bin/env python3
"""The main job, end to end on one machine: start a local Cassandra, load a sample table, read it into Spark
with format("splitsource"), write it to Parquet, and check the Parquet against the table.

    python scripts/demo.py [--rows 200000] [--out ./demo-output]

(The restartable, exactly-once `splitsource copy` job of issue 5 will replace the write step.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from scripts.cassandra import DEFAULT_DIR, cql_up, nodetool, start  # noqa: E402


def load(rows: int) -> None:
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.concurrent import execute_concurrent_with_args
    from cassandra.policies import RoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=60)
    cluster = Cluster(["127.0.0.1"], protocol_version=5, execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    session = cluster.connect()
    session.execute("CREATE KEYSPACE IF NOT EXISTS demo WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute("CREATE TABLE IF NOT EXISTS demo.events (device text, id bigint, at timestamp, reading double, "
                    "status text, payload blob, PRIMARY KEY ((device, id)))")
    have = session.execute("SELECT count(*) FROM demo.events").one()[0]
    if have != rows:
        session.execute("TRUNCATE demo.events")
        insert = session.prepare("INSERT INTO demo.events (device, id, at, reading, status, payload) "
                                 "VALUES (?, ?, toTimestamp(now()), ?, ?, ?)")
        step = 20_000
        for lo in range(0, rows, step):
            args = [(f"device-{i % 97}", i, i * 0.25, "ok" if i % 13 else "alarm", bytes(64))
                    for i in range(lo, min(lo + step, rows))]
            execute_concurrent_with_args(session, insert, args, concurrency=64, raise_on_first_error=True)
            print(f"  loaded {min(lo + step, rows):,}/{rows:,} rows", flush=True)
    cluster.shutdown()
    nodetool(DEFAULT_DIR, 1, "flush", "demo")
    nodetool(DEFAULT_DIR, 1, "refreshsizeestimates")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=ROOT / "demo-output")
    args = parser.parse_args()
    print("1/4 starting the local Cassandra (scripts/cassandra.py) ...", flush=True)
    if not cql_up("127.0.0.1", 9042):
        start(DEFAULT_DIR, nodes=1, num_tokens=16)
    print(f"2/4 loading {args.rows:,} rows into demo.events ...", flush=True)
    load(args.rows)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print("3/4 reading demo.events with format('splitsource') and writing Parquet ...", flush=True)
    t0 = time.perf_counter()
    df = (spark.read.format("splitsource").option("connector", "cassandra")
          .option("keyspace", "demo").option("table", "events").load())
    shutil.rmtree(args.out, ignore_errors=True)
    df.write.parquet(str(args.out))
    took = time.perf_counter() - t0
    print("4/4 verifying ...", flush=True)
    written = spark.read.parquet(str(args.out))
    n = written.count()
    distinct = written.select("device", "id").distinct().count()
    spark.stop()
    ok = n == args.rows == distinct
    print(f"{'OK' if ok else 'MISMATCH'}: {n:,} rows ({distinct:,} distinct keys) in {took:.1f}s "
          f"({n / took:,.0f} rows/s) -> {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
