"""A Spark standalone cluster on loopback, started from the pyspark installation's own ``bin/spark-class``: a
master and ``workers`` workers, each a JVM of its own whose executors run in processes of their own, as on a real
cluster. Used by the cluster tests and ``bench/bench_cluster_copy.py``; every process is stopped by its PID."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

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


@contextmanager
def standalone_cluster(logs: Path, *, workers: int = 1, cores: int = 2, memory: str = "1g",
                       private_dir: Path | None = None) -> Iterator[str]:
    """Yield the master URL of a running cluster; stop every process it started on the way out.

    ``private_dir``: each worker (and so its executors) sees an empty directory of its own there, a tmpfs in a
    mount namespace of its own (``unshare --mount``, as root): what a cluster's machines see at a local path that
    exists on the driver's machine only."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = logs / "master.log"
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(free_port())],
            stdout=master_log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        procs.append(master)
        wait_port(port, master, master_log, time.monotonic() + 120)
        for n in range(workers):
            worker_port = free_port()
            worker_log = logs / f"worker-{n}.log"
            private = ([] if private_dir is None else
                       ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs splitsource-private "$0" && exec "$@"', str(private_dir)])
            worker = subprocess.Popen(
                [*private, spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                 "127.0.0.1", "--port", str(worker_port), "--webui-port", str(free_port()), "--cores", str(cores),
                 "--memory", memory, "--work-dir", str(logs / f"work-{n}")],
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
