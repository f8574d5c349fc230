#!/usr/bin/env python3
"""The main job, end to end on one machine: start a local Cassandra, load a sample table, copy it to Parquet
with `splitsource copy` (exactly once, resumable, with progress), and verify the copy against the table.

    python scripts/demo.py [--rows 200000] [--out ./demo-output/events] [--fresh] [--load-only]

Kill it at any point and run it again: the copy resumes from its checkpoint (<out>.checkpoint). With
SPLITSOURCE_CASSANDRA_HOSTS set it uses that Cassandra (it starts none); --load-only stops once the table is loaded
(what the docs' pages begin with).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# scripts/ holds cassandra.py, which would shadow the driver package: put the repository first instead
sys.path[0] = str(ROOT)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from scripts.cassandra import DEFAULT_DIR, cql_up, insert_rows, nodetool, start  # noqa: E402

HOSTS = os.environ.get("SPLITSOURCE_CASSANDRA_HOSTS", "").strip()  # another node (the docs' tests: the suite's)


def load(rows: int) -> bool:
    """Load ``rows`` rows into demo.events unless it holds exactly that many; True if it (re)loaded them."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=60)
    cluster = Cluster((HOSTS or "127.0.0.1").split(","), protocol_version=5,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    session = cluster.connect()
    session.execute("CREATE KEYSPACE IF NOT EXISTS demo WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute("CREATE TABLE IF NOT EXISTS demo.events (device text, id bigint, at timestamp, reading double, "
                    "status text, payload blob, PRIMARY KEY ((device, id)))")
    have = session.execute("SELECT count(*) FROM demo.events").one()[0]
    reloaded = have != rows
    if reloaded:
        session.execute("TRUNCATE demo.events")
        insert = session.prepare("INSERT INTO demo.events (device, id, at, reading, status, payload) "
                                 "VALUES (?, ?, ?, ?, ?, ?)")
        step = 20_000
        epoch = datetime(2024, 1, 1, tzinfo=timezone.utc)
        for lo in range(0, rows, step):  # the same rows every time: a reloaded table equals the one copied
            args = [(f"device-{i % 97}", i, epoch + timedelta(seconds=i), i * 0.25, "ok" if i % 13 else "alarm",
                     bytes(64)) for i in range(lo, min(lo + step, rows))]
            insert_rows(session, insert, args)
            print(f"  loaded {min(lo + step, rows):,}/{rows:,} rows", flush=True)
    cluster.shutdown()
    if not HOSTS:  # the size estimates that split planning reads: only for the node this script runs
        nodetool(DEFAULT_DIR, 1, "flush", "demo")
        nodetool(DEFAULT_DIR, 1, "refreshsizeestimates")
    return reloaded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=ROOT / "demo-output" / "events")
    parser.add_argument("--fresh", action="store_true", help="delete an earlier demo output and checkpoint first")
    parser.add_argument("--load-only", action="store_true", help="start Cassandra and load the table, then stop")
    args = parser.parse_args()
    if HOSTS:
        print(f"1/4 using the Cassandra at {HOSTS} (SPLITSOURCE_CASSANDRA_HOSTS) ...", flush=True)
    else:
        print("1/4 starting the local Cassandra (scripts/cassandra.py) ...", flush=True)
        if not cql_up("127.0.0.1", 9042):
            start(DEFAULT_DIR, nodes=1, num_tokens=16)
    print(f"2/4 loading {args.rows:,} rows into demo.events ...", flush=True)
    reloaded = load(args.rows)
    if args.load_only:
        print(f"demo.events holds {args.rows:,} rows", flush=True)
        return 0
    if reloaded and (args.out.exists() or Path(f"{args.out}.checkpoint").exists()):
        print("  the table was (re)loaded: its earlier copy is removed, the copy starts afresh", flush=True)
        args.fresh = True
    if args.fresh:
        shutil.rmtree(args.out, ignore_errors=True)
        shutil.rmtree(f"{args.out}.checkpoint", ignore_errors=True)
    source = ["--connector", "cassandra", "-o", f"hosts={HOSTS or '127.0.0.1'}", "-o", "keyspace=demo",
              "-o", "table=events"]
    print(f"3/4 splitsource copy demo.events -> {args.out} (Parquet; kill it at any time and run again) ...",
          flush=True)
    copy = subprocess.run([sys.executable, "-m", "splitsource.cli", "copy", *source, "--output", str(args.out)])
    if copy.returncode != 0:
        return copy.returncode
    print("4/4 splitsource verify ...", flush=True)
    verified = subprocess.run([sys.executable, "-m", "splitsource.cli", "verify", *source, "--output",
                               str(args.out)]).returncode
    print(f"the local Cassandra keeps running for the next run; stop it with: "
          f".venv/bin/python scripts/cassandra.py --dir {DEFAULT_DIR} stop", flush=True)
    return verified


if __name__ == "__main__":
    sys.exit(main())
