#!/usr/bin/env python3
"""Full scan of the 1,000,000-row benchmark table: splitsource side by side with a plain cassandra-driver scan.

Each method runs in its own child process (wall time includes start-up; peak RSS covers the process tree):

- ``driver-1``: one process scans every token range with the driver's paging (rows as tuples, nothing else);
- ``driver-N``: the same split over one process per core: the client-side ceiling on this machine;
- ``splitsource-local``: ``InProcessRuntime`` with 2 readers: enumerator, split readers, Arrow batches, no Spark;
- ``splitsource-spark``: ``spark.read.format("splitsource")`` + ``count()`` in ``local[2]``.

Repeats each ``--repeat`` times, prints medians and the ratio to ``driver-N``, writes bench/results/cassandra.json.

    python bench/bench_cassandra.py --rows 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run, run  # noqa: E402
from bench.cassandra_table import HOSTS, KEYSPACE, TABLE, ensure_cassandra, ensure_loaded  # noqa: E402

MIN_TOKEN, MAX_TOKEN = -(2**63), 2**63 - 1
OPTIONS = {"hosts": HOSTS, "keyspace": KEYSPACE, "table": TABLE}


def _ranges(pieces: int) -> list[tuple[int, int]]:
    width = (MAX_TOKEN - MIN_TOKEN) // pieces
    bounds = [MIN_TOKEN + i * width for i in range(pieces)] + [MAX_TOKEN]
    return list(zip(bounds, bounds[1:], strict=False))


def _driver_scan(ranges: list[tuple[int, int]]) -> int:
    from cassandra.cluster import Cluster
    from cassandra.query import tuple_factory

    cluster = Cluster(HOSTS.split(","), protocol_version=5)
    session = cluster.connect()
    session.row_factory = tuple_factory
    first = session.prepare(f"SELECT * FROM {KEYSPACE}.{TABLE} WHERE token(id) >= ? AND token(id) <= ?")
    rest = session.prepare(f"SELECT * FROM {KEYSPACE}.{TABLE} WHERE token(id) > ? AND token(id) <= ?")
    rows = 0
    for i, (lo, hi) in enumerate(ranges):
        statement = first if i == 0 and lo == MIN_TOKEN else rest
        statement.fetch_size = 5000
        for _ in session.execute(statement, (lo, hi)):
            rows += 1
    cluster.shutdown()
    return rows


def method_driver(processes: int) -> int:
    ranges = _ranges(32 * processes)
    shares = [ranges[i::processes] for i in range(processes)]
    if processes == 1:
        return _driver_scan(ranges)
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        return sum(pool.map(_driver_scan, shares))


def method_local() -> int:
    from connectors.cassandra import CassandraSource
    from splitsource.runtime import InProcessRuntime

    result = InProcessRuntime(CassandraSource(OPTIONS), 2).run()
    return sum(b.num_rows for b in result.batches)


def method_spark() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return int(spark.read.format("splitsource").option("connector", "cassandra").options(**OPTIONS).load()
                   .count())
    finally:
        spark.stop()


METHODS = {
    "driver-1": lambda: method_driver(1),
    f"driver-{os.cpu_count()}": lambda: method_driver(os.cpu_count() or 1),
    "splitsource-local": method_local,
    "splitsource-spark": method_spark,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="run only these methods")
    parser.add_argument("--method", help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.method:
        started = time.perf_counter()
        rows = METHODS[args.method]()
        print(json.dumps({"rows": rows, "inner_seconds": time.perf_counter() - started}))
        return 0
    ensure_loaded(args.rows, ensure_cassandra())
    results: dict[str, Any] = {}
    for name in args.only or METHODS:
        runs = []
        for _ in range(args.repeat):
            measured = run([sys.executable, __file__, "--method", name])
            if measured.returncode != 0:
                raise SystemExit(f"{name} failed:\n{measured.output[-3000:]}")
            report = json.loads(measured.output.strip().splitlines()[-1])
            if report["rows"] != args.rows:
                raise SystemExit(f"{name} read {report['rows']} rows, expected {args.rows}")
            runs.append((measured.seconds, measured.peak_rss_mb, report["inner_seconds"]))
        wall = statistics.median(r[0] for r in runs)
        results[name] = {"wall_s": round(wall, 2), "rows_per_s": round(args.rows / wall),
                         "scan_s": round(statistics.median(r[2] for r in runs), 2),
                         "peak_rss_mb": round(max(r[1] for r in runs))}
        print(f"{name:20s} {wall:7.2f} s  {args.rows / wall:>10,.0f} rows/s  peak {results[name]['peak_rss_mb']} MB",
              flush=True)
    ceiling = results.get(f"driver-{os.cpu_count()}")
    if ceiling:
        for r in results.values():
            r["ratio_to_driver_per_core"] = round(r["rows_per_s"] / ceiling["rows_per_s"], 2)
        print("ratio to the driver, one process per core: "
              + ", ".join(f"{k} {v['ratio_to_driver_per_core']}" for k, v in results.items()))
    record_run("cassandra", {"rows": args.rows, "repeat": args.repeat, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
