#!/usr/bin/env python3
"""The Spark engine's copy of the 1M-row benchmark table on a standalone cluster of two workers, beside local[2].

A master and two workers (one core and 1 GiB each: this machine has two cores) are started from the pyspark
installation (``scripts/spark_standalone.py``); ``splitsource copy --master spark://...`` then runs with its
executors in processes of their own, as on a real cluster. The same copy runs with ``--master local[2]`` in the
same round. Every copy's Parquet rows are counted before its time counts; medians of ``--repeat`` rounds.

    python bench/bench_cluster_copy.py --repeat 2
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import (  # noqa: E402
    Measured,
    record_run,  # noqa: E402
    run,
)
from bench.cassandra_table import HOSTS, KEYSPACE, TABLE, ensure_cassandra, ensure_loaded  # noqa: E402
from scripts.spark_standalone import standalone_cluster  # noqa: E402


def _parquet_rows(directory: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in directory.rglob("*.parquet"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    ensure_loaded(args.rows, ensure_cassandra())
    copy = [sys.executable, "-m", "splitsource.cli", "copy", "--connector", "cassandra", "-o", f"hosts={HOSTS}",
            "-o", f"keyspace={KEYSPACE}", "-o", f"table={TABLE}", "--quiet"]
    runs: dict[str, list[Measured]] = {}
    with tempfile.TemporaryDirectory() as tmp, standalone_cluster(Path(tmp), workers=2, cores=1) as master:
        methods = {"copy --master local[2]": "local[2]", "copy --master spark:// (2 workers x 1 core)": master}
        for round_ in range(1, args.repeat + 1):
            for name, url in methods.items():
                out = Path(tmp, "out")
                measured = run([*copy, "--master", url, "--output", str(out)])
                rows = _parquet_rows(out) if measured.returncode == 0 else -1
                if rows != args.rows:
                    raise SystemExit(f"{name}: {rows} rows instead of {args.rows}:\n{measured.output[-3000:]}")
                runs.setdefault(name, []).append(measured)
                print(f"round {round_}: {name:46s} {measured.seconds:7.2f} s", flush=True)
                shutil.rmtree(out)
                shutil.rmtree(f"{out}.checkpoint")
                shutil.rmtree(f"{out}.bucketing")  # the output's records (owner, commit log) beside it
    results = {name: {"wall_s": round(statistics.median(m.seconds for m in measured), 2),
                      "rows_per_s": round(args.rows / statistics.median(m.seconds for m in measured)),
                      "runs_s": [round(m.seconds, 2) for m in measured]} for name, measured in runs.items()}
    print(f"\n{'method':46s} {'wall s':>8s} {'rows/s':>10s}")
    for name, r in results.items():
        print(f"{name:46s} {r['wall_s']:8.2f} {r['rows_per_s']:10,d}")
    record_run("cluster_copy", {"rows": args.rows, "repeat": args.repeat, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
