"""A write job run in its own process by the sink tests (to kill it, or to run Spark with task retries).

    python sink_job.py <out> <rows> [--fail-once-dir D] [--hold-dir D]

Writes ``rows`` rows (id, k, payload) with ``format("bucketing")`` to ``<out>`` in ``local[2,4]`` (a task may fail
up to 3 times). ``--fail-once-dir``: the first attempt of partition 1 fails halfway through its rows (and leaves
a marker).
``--hold-dir``: partition 0 holds halfway through its rows (its first rows passed on to the writer), touching
``D/reached`` and waiting to be killed: the write cannot commit, however fast the machine.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HOLD_S = 600.0  # a job nobody kills ends by itself

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# C1 only, and the serial collector: a job of seconds pays more for C2's and G1's threads than for its work on 2
# cores (table_stream_job.py: 30 s -> 24 s)
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      '--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell')


def main() -> int:
    from pyspark.sql import SparkSession

    out, rows = sys.argv[1], int(sys.argv[2])
    fail_dir = sys.argv[sys.argv.index("--fail-once-dir") + 1] if "--fail-once-dir" in sys.argv else ""
    hold_dir = sys.argv[sys.argv.index("--hold-dir") + 1] if "--hold-dir" in sys.argv else ""
    spark = (SparkSession.builder.master("local[2,4]").config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")

    def rows_of(partition: int):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        marker = Path(fail_dir) / f"failed-{partition}" if fail_dir else None
        per = rows // 4
        for i in range(partition * per, (partition + 1) * per if partition < 3 else rows):
            if hold_dir and partition == 0 and i == per // 2:
                (Path(hold_dir) / "reached").touch()
                deadline = time.monotonic() + HOLD_S
                while time.monotonic() < deadline:
                    time.sleep(0.05)
                os._exit(3)
            if (marker is not None and partition == 1 and i == partition * per + per // 2
                    and TaskContext.get().attemptNumber() == 0):
                marker.touch()
                raise RuntimeError("injected task failure mid-write")
            yield (i, i % 5, "x" * 50)

    df = spark.sparkContext.parallelize(range(4), 4).flatMap(rows_of).toDF("id long, k long, payload string")
    (df.write.format("bucketing").option("format", "parquet").option("bucketer", "columns")
     .option("bucket_columns", "k").mode("append").save(out))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
