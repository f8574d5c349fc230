"""A read through a Spark standalone cluster: executors in processes of their own, as on a real cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.spark_standalone import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


@dataclass(frozen=True)
class Standalone:
    url: str
    driver_only: Path  # on the driver's disk; each worker sees an empty tmpfs there


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, s3: object) -> Iterator[Standalone]:
    """A master and two workers of one core each, started with the pyspark installation's own bin/spark-class, on
    loopback: one cluster for the module (a start costs about 30 s on 2 cores). Started after the S3 server, whose
    address its executors take from the environment the workers start in."""
    driver_only = tmp_path_factory.mktemp("driver-only")
    logs = tmp_path_factory.mktemp("standalone")
    with standalone_cluster(logs, workers=2, cores=1, memory="1g", private_dir=driver_only) as url:
        yield Standalone(url, driver_only)


def test_read_on_a_standalone_cluster(standalone: Standalone) -> None:
    script = textwrap.dedent(
        f"""
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("{standalone.url}").appName("splitsource-cluster-test")
                 .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
                 .config("spark.cores.max", "2").getOrCreate())
        df = (spark.read.format("splitsource").option("connector", "generator").option("rows", "200000")
              .option("split_rows", "20000").option("partitions", "4").load())
        rows = df.selectExpr("count(*) AS n", "count(DISTINCT id) AS d", "min(id) AS lo", "max(id) AS hi").first()
        print("RESULT", rows.n, rows.d, rows.lo, rows.hi)
        pids = df.rdd.mapPartitions(lambda _: [__import__("os").getpid()]).distinct().collect()
        import os
        print("EXECUTOR_PIDS_DIFFER", all(p != os.getpid() for p in pids))
        spark.stop()
        """
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert "RESULT 200000 200000 0 199999" in out.stdout, out.stderr[-4000:]
    assert "EXECUTOR_PIDS_DIFFER True" in out.stdout


COPY_ROWS = 20_000


def _copy(master: str, output: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "splitsource.cli", "copy", "--connector", "generator",
                           "-o", f"rows={COPY_ROWS}", "-o", "split_rows=5000", "--master", master,
                           "--output", output, "--quiet"], capture_output=True, text=True, timeout=300, env=env)


def test_a_cluster_copy_refuses_storage_its_executors_cannot_see_and_writes_s3_exactly(
        standalone: Standalone) -> None:
    from tests.splitsource.copyjob.test_object_store import _ids

    shared = standalone.driver_only
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    refused = _copy(standalone.url, str(shared / "out"), env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith(f"splitsource copy: output {shared / 'out'}: Spark's executors (on "), line
    assert "write where this machine does not read" in line
    assert list(shared.iterdir()) == [], "the refused copy left something behind"  # claimed nothing
    done = _copy(standalone.url, "s3://lake/from-a-cluster", env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"copy finished: {COPY_ROWS:,} rows" in done.stdout
    assert _ids("s3://lake/from-a-cluster") == list(range(COPY_ROWS))
