#!/usr/bin/env python3
"""What the splitsource framework costs over a minimal hand-written Arrow data source.

Reads N generator rows of (bigint, double, string) three ways in local[2] and times ``count()`` and
``write.parquet``:

1. ``format("splitsource")`` with the generator connector (enumerator, fetcher thread, emitter, conform);
2. a minimal Python data source that yields the very same Arrow batches (same generate_batch, same partitions);
3. ``spark.range`` with the same columns computed by Spark SQL (no Python at all: the JVM ceiling).

Prints rows/s per method and operation and the ratio of (1) to (2); writes bench/results/framework.json.
Target: splitsource costs at most 10% against (2), i.e. a ratio of at least 0.90.

    python bench/bench_framework.py --rows 5000000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)

import pyarrow as pa  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from bench._measure import record_run  # noqa: E402

COLUMNS = "id:bigint,value:double,name:string"
BATCH = 65536


class MinimalArrowSource(DataSource):
    """The baseline: the same batches as the generator, with nothing in between."""

    @classmethod
    def name(cls) -> str:
        return "minimal_arrow"

    def schema(self) -> str:
        return "id bigint, value double, name string"

    def reader(self, schema: Any) -> DataSourceReader:
        return MinimalReader(int(self.options["rows"]), int(self.options["partitions"]))


class MinimalReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int) -> None:
        self.rows, self.parts = rows, partitions

    def partitions(self) -> list[InputPartition]:
        step = -(-self.rows // self.parts)
        return [InputPartition((i * step, min((i + 1) * step, self.rows))) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from connectors.generator import GeneratorSource, generate_batch

        source = GeneratorSource({"columns": COLUMNS})
        schema = pa.schema([pa.field(f.name, f.type, nullable=True) for f in source.schema()])
        start, end = partition.value
        for lo in range(start, end, BATCH):
            yield generate_batch(source.options, schema, lo, min(lo + BATCH, end))


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "framework.json")
    args = parser.parse_args()

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MinimalArrowSource)
    rows, parts = args.rows, args.partitions
    split_rows = -(-rows // (parts * 8))
    frames = {
        "splitsource": lambda: spark.read.format("splitsource").option("connector", "generator")
        .option("rows", rows).option("columns", COLUMNS).option("split_rows", split_rows)
        .option("batch_rows", BATCH).option("partitions", parts).load(),
        "minimal_arrow": lambda: spark.read.format("minimal_arrow").option("rows", rows)
        .option("partitions", parts).load(),
        "spark_range": lambda: spark.range(0, rows, 1, parts).selectExpr(
            "id", "rand(0) AS value", "concat('name-', CAST(abs(hash(id)) % 1000000000 AS STRING)) AS name"),
    }
    out_dir = Path(tempfile.mkdtemp(prefix="bench-framework-"))
    results: dict[str, dict[str, float]] = {}
    try:
        for name, make in frames.items():
            make().count()  # warm up workers and the JIT
            for op in ("count", "write_parquet"):
                times = []
                for i in range(args.repeat):
                    target = out_dir / f"{name}-{op}-{i}"
                    if op == "count":
                        times.append(timed(lambda m=make: m().count()))
                    else:
                        times.append(timed(lambda m=make, t=target: m().write.mode("overwrite").parquet(str(t))))
                    shutil.rmtree(target, ignore_errors=True)
                med = statistics.median(times)
                results.setdefault(name, {})[op] = rows / med
                print(f"{name:14s} {op:14s} median {med:7.2f}s  {rows / med:12,.0f} rows/s", flush=True)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        spark.stop()
    print()
    for op in ("count", "write_parquet"):
        ratio = results["splitsource"][op] / results["minimal_arrow"][op]
        vs_range = results["splitsource"][op] / results["spark_range"][op]
        print(f"{op:14s} splitsource/minimal_arrow = {ratio:.2f}   splitsource/spark_range = {vs_range:.2f}")
    record_run(args.out.stem, {"rows": rows, "repeat": args.repeat, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
