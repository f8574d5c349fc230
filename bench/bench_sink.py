#!/usr/bin/env python3
"""``df.write.format("bucketing")`` to Parquet side by side with Spark's own ``df.write.parquet``.

The same cached 5,000,000-row DataFrame (bigint, double, string, timestamp) is written both ways in
``local[2]``; each write is repeated and the medians compared. Target: bucketing at least 0.90x Spark.
Writes bench/results/sink.json.

    python bench/bench_sink.py --rows 5000000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main() -> int:
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", os.environ.get("ARROW_BATCH", "10000"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, args.rows, 1, 2).selectExpr(
        "id", "id * 0.5 AS value", "concat('name-', id) AS name",
        "timestamp_seconds(1700000000 + id) AS created").cache()
    df.count()
    out = Path(tempfile.mkdtemp(prefix="bench-sink-"))
    writes = {
        "spark_parquet": lambda p: df.write.mode("overwrite").parquet(p),
        "bucketing_parquet": lambda p: df.write.format("bucketing").option("bucketer", "none")
        .mode("overwrite").save(p),
    }
    results = {}
    try:
        for name, write in writes.items():
            write(str(out / f"{name}-warm"))
            times = []
            for i in range(args.repeat):
                target = str(out / f"{name}-{i}")
                started = time.perf_counter()
                write(target)
                times.append(time.perf_counter() - started)
                shutil.rmtree(target, ignore_errors=True)
            median = statistics.median(times)
            results[name] = {"seconds": round(median, 2), "rows_per_s": round(args.rows / median)}
            print(f"{name:18s} {median:6.2f} s  {args.rows / median:>12,.0f} rows/s", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        spark.stop()
    ratio = results["bucketing_parquet"]["rows_per_s"] / results["spark_parquet"]["rows_per_s"]
    print(f"bucketing / spark parquet = {ratio:.2f} (target >= 0.90)")
    name = "sink" if "ARROW_BATCH" not in os.environ else f"sink-arrow-batch-{os.environ['ARROW_BATCH']}"
    record_run(name, {"rows": args.rows, "repeat": args.repeat, "results": results, "ratio": round(ratio, 2)},
               env=("ARROW_BATCH",))
    return 0


if __name__ == "__main__":
    sys.exit(main())
