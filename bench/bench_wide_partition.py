"""The cost of the wide-partition path: one partition of 200,000 rows read by one reader with default pages,
with smaller pages from the start, and through two timed-out pages that shrink (the path).

    python bench/bench_wide_partition.py --repeat 3     # starts the local node of scripts/cassandra.py if needed

The timed-out pages are made as in the tests (``tests/connectors/cassandra/timeout_pages.py``): read from the
real server, then dropped as a client that gave up on them would, so the path pays what a real timeout costs
short of the wait itself: a real one also waits ``request_timeout_s`` per timed-out page. (A real timeout on
this partition cannot be had: a page of 5,000 rows comes back in a few milliseconds here, well below the
smallest ``request_timeout_s`` of 0.1 s; the figures printed at the end show it.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run  # noqa: E402

KEYSPACE, TABLE, KEY = "bench", "wide", 7


def ensure_wide(rows: int) -> None:
    from cassandra.concurrent import execute_concurrent
    from cassandra.query import BatchStatement, BatchType

    from bench.cassandra_table import session

    cluster, s = session()
    try:
        s.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                  "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        s.execute(f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{TABLE} (pk int, ck int, payload text, "
                  "PRIMARY KEY (pk, ck))")
        if s.execute(f"SELECT count(*) FROM {KEYSPACE}.{TABLE} WHERE pk = {KEY}").one()[0] == rows:
            return
        insert = s.prepare(f"INSERT INTO {KEYSPACE}.{TABLE} (pk, ck, payload) VALUES (?, ?, ?)")
        batches = []
        for start in range(0, rows, 500):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for ck in range(start, min(start + 500, rows)):
                batch.add(insert, (KEY, ck, f"row {ck:07d} of the wide partition, some text to widen it"))
            batches.append((batch, ()))
        execute_concurrent(s, batches, concurrency=16, raise_on_first_error=True)
    finally:
        cluster.shutdown()


def read_once(connector: str, options: dict[str, str]) -> tuple[float, int, dict[str, int]]:
    from splitsource._planning import build_source
    from splitsource.runtime import SourceReader

    _, source = build_source({"connector": connector, **options})
    enumerator = source.create_enumerator(None)  # type: ignore[arg-type]
    enumerator.start()
    started = time.perf_counter()
    reader = SourceReader(source, enumerator.next_split)
    rows = sum(b.num_rows for b in reader.read())
    return time.perf_counter() - started, rows, dict(reader.metrics.event_counts)


def page_seconds(options: dict[str, str], size: int) -> float:
    """The median time of one page of ``size`` rows of the wide partition."""
    from bench.cassandra_table import session

    cluster, s = session()
    try:
        statement = s.prepare(f"SELECT * FROM {KEYSPACE}.{TABLE} WHERE pk = {KEY}")
        statement.fetch_size = size
        times = []
        for _ in range(5):
            started = time.perf_counter()
            s.execute(statement)
            times.append(time.perf_counter() - started)
        return statistics.median(times)
    finally:
        cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import logging

    from bench.cassandra_table import ensure_cassandra

    logging.getLogger("splitsource").setLevel(logging.ERROR)  # the path's own warnings, once per run
    ensure_cassandra()
    ensure_wide(args.rows)
    base = {"hosts": "127.0.0.1", "keyspace": KEYSPACE, "table": TABLE, "splits": "1"}
    t5000, t1250 = page_seconds(base, 5000), page_seconds(base, 1250)
    proof = tempfile.mkdtemp(prefix="bench-wide-")
    fake = "tests.connectors.cassandra.timeout_pages:TimeoutPagesSource"
    cases: list[tuple[str, str, dict[str, str]]] = [
        ("default pages (5,000 rows), no timeout", "cassandra", base),
        ("small pages (1,250 rows) from the start", "cassandra", {**base, "fetch_size": "1250"}),
        ("two pages time out and shrink 5,000 -> 1,250", fake, {**base, "max_page": "2000", "proof": proof}),
    ]
    results: list[dict[str, Any]] = []
    baseline = 0.0
    for name, connector, options in cases:
        runs = [read_once(connector, options) for _ in range(args.repeat)]
        best = min(r[0] for r in runs)
        assert all(r[1] == args.rows for r in runs), runs
        baseline = baseline or best
        results.append({"case": name, "seconds": round(best, 3), "rows_per_s": round(args.rows / best),
                        "ratio": round(best / baseline, 3), "events": runs[0][2]})
        print(f"{name:52} {best:7.3f} s  {args.rows / best:>10,.0f} rows/s  x{best / baseline:5.2f}  "
              f"events {runs[0][2] or '-'}", flush=True)
    print(f"one page of 5,000 rows: {t5000 * 1000:.1f} ms, of 1,250 rows: {t1250 * 1000:.1f} ms")
    record_run("wide_partition", {"rows": args.rows, "page_5000_s": t5000, "page_1250_s": t1250,
                                  "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
