"""A read through a Spark standalone cluster: executors in processes of their own, as on a real cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited early:\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"port {port} not open:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A master and one worker started with the pyspark installation's own bin/spark-class, on loopback."""
    logs = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, worker_port = free_port(), free_port()
    procs = []
    try:
        master_log = logs / "master.log"
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(free_port())],
            stdout=master_log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        procs.append(master)
        wait_port(port, master, master_log, time.monotonic() + 120)
        worker_log = logs / "worker.log"
        worker = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
             "127.0.0.1", "--port", str(worker_port), "--webui-port", str(free_port()), "--cores", "2",
             "--memory", "1g", "--work-dir", str(logs / "work")],
            stdout=worker_log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        procs.append(worker)
        wait_port(worker_port, worker, worker_log, time.monotonic() + 120)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_read_on_a_standalone_cluster(standalone: str) -> None:
    script = textwrap.dedent(
        f"""
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("{standalone}").appName("splitsource-cluster-test")
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
