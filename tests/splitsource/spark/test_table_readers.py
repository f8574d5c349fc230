"""Spark's own table connectors read the tables a copy made, exactly, with time travel to each batch's version.

Delta Lake's Spark connector (delta-spark 4.4.0, built on Spark 4.2, from Maven Central) runs on Spark 4.2, not on
4.3 (``NoSuchMethodError`` in ``LogicalRDD``): this test reads in a PySpark 4.2 of its own, installed apart by
scripts/test.sh (``.venv/pyspark-4.2``). Iceberg's Spark runtime has no release for Spark 4.2 or 4.3 (the newest,
for 4.1, fails on both with ``IncompatibleClassChangeError``); Iceberg tables are read here through Iceberg's own
REST catalog server (a Java Iceberg reading our metadata) and Polars (tests/splitsource/copyjob/test_table_copy.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from splitsource.sink import parse_sink_options
from tests.fixtures import ROOT
from tests.splitsource.copyjob.test_copy import run

pytestmark = [pytest.mark.spark, pytest.mark.slow]
JOB = Path(__file__).parent / "table_reader_job.py"
SPARK_42 = ROOT / ".venv" / "pyspark-4.2"
GEN = ["--connector", "generator", "-o", "rows=30000", "-o", "split_rows=5000",
       "-o", "columns=id:bigint,name:string?,score:double,at:timestamp"]


def test_spark_with_delta_reads_the_copy_exactly_and_travels_to_each_batch(tmp_path: Path) -> None:
    assert (SPARK_42 / ".complete").exists(), "PySpark 4.2 is not installed apart: run scripts/test.sh"
    out = tmp_path / "table"
    result = run(["copy", *GEN, "--engine", "local", "--output", str(out), "--table-format", "delta",
                  "--max-splits-per-batch", "2", "--quiet"])
    assert result.returncode == 0, result.stderr[-3000:]
    committer = parse_sink_options({"path": str(out), "table_format": "delta"}).committer()
    assert committer.table is not None
    history = committer.table.history(committer)
    assert [c.seq for c in history] == [1, 2, 3]  # 6 splits, 2 a batch
    # the truth of each version: the rows its batches committed, from the sink's own log
    totals = {str(c.version): r.total_rows for c, (r, _) in zip(history, committer.records(), strict=True)}
    assert list(totals.values()) == [10_000, 20_000, 30_000]
    env = {**os.environ, "PYTHONPATH": str(SPARK_42), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, str(JOB), "delta", str(out), ",".join(totals)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["spark"].startswith("4.2")
    assert read["ids"] == list(range(30_000))
    assert read["counts"] == totals
