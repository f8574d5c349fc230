"""Spark's own table connectors read the tables a copy made, exactly, with time travel to each batch's version.

The connectors lag Spark's releases, and neither runs on Spark 4.3 (measured on 2026-11-25 with the newest on Maven
Central): Delta's Spark connector (delta-spark 4.4.0, built on Spark 4.2) fails on 4.3 with ``NoSuchMethodError``
in ``LogicalRDD``; Iceberg's Spark runtime has no release for 4.2 or 4.3, and the newest (for 4.1, 1.12.0) fails on
both with ``IncompatibleClassChangeError`` (``CatalogManager``). So each table is read in the newest Spark its
connector runs on, a PySpark installed apart by scripts/test.sh (``.venv/pyspark-4.2``, ``.venv/pyspark-4.1``) and
put first on the reader's path only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import spark_tables
from splitsource.sink import parse_sink_options
from tests.fixtures import ROOT, await_setup
from tests.splitsource.copyjob.test_copy import run

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.usefixtures("pyiceberg_planner")]
JOB = Path(__file__).parent / "table_reader_job.py"
SPARK_42 = ROOT / ".venv" / "pyspark-4.2"
SPARK_41 = ROOT / ".venv" / "pyspark-4.1"
GEN = ["--connector", "generator", "-o", "rows=30000", "-o", "split_rows=5000",
       "-o", "columns=id:bigint,name:string?,score:double,at:timestamp,flag:boolean?"]


def _copy_and_read_with_spark(tmp_path: Path, fmt: str, spark: Path) -> None:
    """Copy 6 splits, 2 a batch, into a ``fmt`` table partitioned by a nullable column; read it in the PySpark at
    ``spark`` (its line's connector): every id once, the rows of each partition as Polars (through delta-rs or
    pyiceberg) reads them, a filter on the partition column, and each version or snapshot holds the rows its
    batches committed (the sink's own log)."""
    import polars as pl

    from splitsource.sink import open_table

    await_setup("packages", "table-jars")
    assert (spark / ".complete").exists(), f"{spark.name} is not installed apart: run scripts/test.sh"
    out = tmp_path / "table"
    result = run(["copy", *GEN, "--engine", "local", "--output", str(out), "--table-format", fmt,
                  "--bucketer", "columns", "--sink-option", "bucket_columns=flag", "--max-splits-per-batch", "2",
                  "--quiet"])
    assert result.returncode == 0, result.stderr[-3000:]
    committer = parse_sink_options({"path": str(out), "table_format": fmt}).committer()
    assert committer.table is not None
    history = committer.table.history(committer)
    assert [c.seq for c in history] == [1, 2, 3]
    totals = {str(c.version): r.total_rows for c, (r, _) in zip(history, committer.records(), strict=True)}
    assert list(totals.values()) == [10_000, 20_000, 30_000]
    where = str(out) if fmt == "delta" else open_table(str(out)).metadata_location
    env = {**os.environ, "PYTHONPATH": str(spark), "PYSPARK_PYTHON": sys.executable}
    jars = ",".join(str(j) for j in spark_tables.jars(fmt, spark))
    done = subprocess.run([sys.executable, str(JOB), fmt, where, ",".join(totals), jars], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["spark"].startswith(spark.name.rsplit("-", 1)[1])
    assert read["ids"] == list(range(30_000))
    assert read["counts"] == totals
    frame = pl.read_delta(str(out)) if fmt == "delta" else pl.scan_iceberg(open_table(str(out))).collect()
    by_flag = {str(r["flag"]).lower(): r["len"] for r in frame.group_by("flag").len().iter_rows(named=True)}
    assert set(by_flag) == {"true", "false", "none"} and sum(by_flag.values()) == 30_000
    assert read["by_flag"] == by_flag and read["flag_true"] == by_flag["true"]


def test_spark_with_delta_reads_the_copy_exactly_and_travels_to_each_batch(tmp_path: Path) -> None:
    _copy_and_read_with_spark(tmp_path, "delta", SPARK_42)


def test_spark_with_iceberg_reads_the_copy_exactly_and_travels_to_each_snapshot(tmp_path: Path) -> None:
    _copy_and_read_with_spark(tmp_path, "iceberg", SPARK_41)
