"""A streaming query into a table, run in its own process by tests/splitsource/spark/test_table_stream.py (to kill
it): every JSON file of ``<source>``, one file per micro-batch, into ``<out>`` with ``format("bucketing")`` and
``table_format``, ``trigger(availableNow=True)``, checkpoint ``<checkpoint>``.

    python table_stream_job.py <source> <out> <checkpoint> <delta|iceberg> [<gate> <batch> <point>]

With a gate, the commit of micro-batch ``<batch>`` holds at ``<point>`` (it runs in one of Spark's Python workers,
which unpickle the sink's class from this script), touching ``<gate>/reached`` there and waiting to be killed:

- ``written``: every task's pending files are written, nothing of the batch is logged;
- ``published``: the batch's table commit is made, the sink's own record of it not marked done;
- ``committed``: the sink committed the batch, Spark's checkpoint does not know it yet (a restart replays it).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# C1 only, and the serial collector: a job of seconds pays more for C2's and G1's threads than for its work on 2
# cores (table_stream_job.py: 30 s -> 24 s)
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      '--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell')

from splitsource.sink import parse_sink_options  # noqa: E402 - after the JVM's options
from splitsource.spark import BucketingDataSource  # noqa: E402
from splitsource.spark._sink import BucketingStreamWriter  # noqa: E402

POINTS = ("written", "published", "committed")
HOLD_ENV = "TABLE_STREAM_HOLD"  # "<gate>\t<batch>\t<point>", read in the worker that commits
HOLD_S = 600.0  # a job nobody kills ends by itself


def _hold(gate: str, point: str) -> None:
    (Path(gate) / "reached").write_text(point)
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(3)


class HeldStreamWriter(BucketingStreamWriter):
    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's parameter name
        hold = os.environ.get(HOLD_ENV, "")
        gate, batch, point = hold.split("\t") if hold else ("", "-1", "")
        if batchId != int(batch):
            return super().commit(messages, batchId)
        if point == "written":
            _hold(gate, point)
        if point == "published":
            from splitsource.sink import _committer

            publish = _committer.publish  # type: ignore[attr-defined]

            def published(*a: Any, **k: Any) -> None:
                publish(*a, **k)
                _hold(gate, point)

            _committer.publish = published  # type: ignore[attr-defined,assignment]
        super().commit(messages, batchId)
        _hold(gate, point)  # committed


class HeldBucketing(BucketingDataSource):
    @classmethod
    def name(cls) -> str:
        return "bucketing-held"

    def streamWriter(self, schema: Any, overwrite: bool) -> HeldStreamWriter:  # noqa: N802
        return HeldStreamWriter(parse_sink_options(dict(self.options)))


def main() -> int:
    from pyspark.sql import SparkSession

    source, out, checkpoint, fmt = sys.argv[1:5]
    if len(sys.argv) > 5:
        gate, batch, point = sys.argv[5:8]
        assert point in POINTS, point
        os.environ[HOLD_ENV] = f"{gate}\t{batch}\t{point}"  # before the JVM starts: its workers inherit it
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    spark.dataSource.register(HeldBucketing)
    query = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(source)
             .writeStream.format("bucketing-held").option("table_format", fmt)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(out))
    query.awaitTermination()
    spark.stop()
    return 0 if query.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main())
