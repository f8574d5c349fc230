"""A streaming query into a table, run in its own process by tests/splitsource/spark/test_table_stream.py (to kill
it): every JSON file of ``<source>``, one file per micro-batch, into ``<out>`` with ``format("bucketing")`` and
``table_format``, ``trigger(availableNow=True)``, checkpoint ``<checkpoint>``.

    python table_stream_job.py <source> <out> <checkpoint> <delta|iceberg>
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# C1 only, and the serial collector: a job of seconds pays more for C2's and G1's threads than for its work on 2
# cores (table_stream_job.py: 30 s -> 24 s)
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      '--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell')


def main() -> int:
    from pyspark.sql import SparkSession

    source, out, checkpoint, fmt = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    query = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(source)
             .writeStream.format("bucketing").option("table_format", fmt).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(out))
    query.awaitTermination()
    spark.stop()
    return 0 if query.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main())
