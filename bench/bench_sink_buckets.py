#!/usr/bin/env python3
"""Many buckets: ``df.write.format("bucketing")`` (bucketer=columns) against Spark's ``partitionBy(...).parquet``.

``spark.range(rows)`` with a 100-byte string column and a bucket column ``b`` of ``N`` distinct values, spread
over the rows in no order (``pmod(hash(id), N)``), cached, then written both ways in ``local[2]`` at each bucket
count, in one run, after an untimed warm-up write of each. Printed per bucket count: time, rows/s, the ratio
bucketing / Spark (target >= 0.80), the files written, and the peak RSS of one Spark Python worker (sampled every
0.1 s; target: the sink's buffer_mb plus 300 MB). Spark's own write runs no Python code: on its line the figure is
an idle worker left from before. Writes bench/results/sink_buckets.json.

    python bench/bench_sink_buckets.py --rows 2000000 --buckets 10,2000,20000
    python bench/bench_sink_buckets.py --rows 2000000 --buckets 10 --repeat 3    # medians of 3 (the fast case)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import record_run  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _descendants(root: int) -> list[int]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, []))
    return out


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _is_python_worker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"pyspark" in cmdline and b"python" in cmdline.split(b" ")[0]


class WorkerPeak:
    """The highest RSS any one Python worker under this process reached while it ran."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            for pid in _descendants(me):
                if pid != me and _is_python_worker(pid):
                    self.peak = max(self.peak, _rss_mb(pid))
            self._stop.wait(0.1)

    def __enter__(self) -> WorkerPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _files(path: Path) -> int:
    return sum(1 for p in path.rglob("*.parquet"))


def main() -> int:
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--buckets", default="10,2000,20000", help="bucket counts, comma-separated")
    parser.add_argument("--buffer-mb", type=float, default=128.0, help="the sink's buffer_mb")
    parser.add_argument("--repeat", type=int, default=1, help="writes per method and bucket count (median)")
    args = parser.parse_args()
    counts = [int(c) for c in args.buckets.split(",")]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out = Path(tempfile.mkdtemp(prefix="bench-buckets-"))
    results: dict[str, dict[str, float]] = {}
    print(f"{args.rows:,} rows, 100-byte text, local[2], buffer_mb={args.buffer_mb:g}", flush=True)
    print(f"{'buckets':>8} {'method':10} {'seconds':>8} {'rows/s':>11} {'files':>7} {'worker peak':>12}", flush=True)
    try:
        # warm-up, not timed: the first write of a session pays for the Python workers' start and the JVM's
        # first compilations (measured: 7 s against 1.2 s for the same no-op Python write)
        warm = spark.range(0, 100_000, 1, 2).selectExpr("id", "CAST(pmod(id, 10) AS STRING) AS b", "'x' AS text")
        warm.write.mode("overwrite").partitionBy("b").parquet(str(out / "warm-spark"))
        warm.write.format("bucketing").option("bucketer", "columns").option("bucket_columns", "b") \
            .mode("overwrite").save(str(out / "warm-bucketing"))
        for n in counts:
            df = spark.range(0, args.rows, 1, 2).selectExpr(
                "id", f"CAST(pmod(hash(id), {n}) AS STRING) AS b", "repeat(uuid(), 3) AS text")
            df = df.selectExpr("id", "b", "substr(text, 1, 100) AS text").cache()
            df.count()
            writes = {
                "spark": lambda p, df=df: df.write.mode("overwrite").partitionBy("b").parquet(p),
                "bucketing": lambda p, df=df: df.write.format("bucketing").option("bucketer", "columns")
                .option("bucket_columns", "b").option("buffer_mb", str(args.buffer_mb)).mode("overwrite").save(p),
            }
            row: dict[str, float] = {}
            for name, write in writes.items():
                target = out / f"{name}-{n}"
                times = []
                with WorkerPeak() as peak:
                    for _ in range(args.repeat):
                        shutil.rmtree(target, ignore_errors=True)
                        started = time.perf_counter()
                        write(str(target))
                        times.append(time.perf_counter() - started)
                seconds = statistics.median(times)
                files = _files(target)
                shutil.rmtree(target, ignore_errors=True)
                row.update({f"{name}_s": round(seconds, 2), f"{name}_files": files,
                            f"{name}_worker_peak_mb": round(peak.peak)})
                shown = f"{peak.peak:,.0f} MB" if peak.peak else "(no worker)"
                print(f"{n:>8,} {name:10} {seconds:8.2f} {args.rows / seconds:>11,.0f} {files:>7,} {shown:>12}",
                      flush=True)
            row["ratio"] = round(row["spark_s"] / row["bucketing_s"], 2)
            results[str(n)] = row
            print(f"{n:>8,} bucketing / spark = {row['ratio']:.2f} (target >= 0.80); worker peak "
                  f"{row['bucketing_worker_peak_mb']:,} MB (target <= {args.buffer_mb + 300:,.0f} MB)", flush=True)
            df.unpersist()
    finally:
        shutil.rmtree(out, ignore_errors=True)
        spark.stop()
    name = "sink_buckets.json" if args.repeat == 1 else f"sink_buckets-repeat-{args.repeat}.json"
    record_run(name.removesuffix(".json"), {"rows": args.rows, "buffer_mb": args.buffer_mb, "repeat": args.repeat,
                                            "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
