"""The copy's own Spark session: started quiet and quick (its driver JVM's options, the class archive of
:mod:`splitsource.spark._jvm`), and stopped without waiting on PySpark's accumulator server.

``python -m splitsource.spark._session --record`` is the archive's recording child (:func:`record`)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import splitsource.spark._jvm as _jvm
from splitsource._errors import OptionsError
from splitsource.copyjob._failures import root_cause

__all__ = ["record", "running_session", "start_session", "stop_session"]


def running_session() -> Any:
    """The Spark session already running in this process (a user's, a notebook's), or None: a copy runs its jobs
    there and leaves it running, where a session of its own would be that one again (``getOrCreate``) and be
    stopped under its user at the copy's end."""
    if "pyspark" not in sys.modules:  # nothing of Spark has run here
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def start_session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    quiet = Path(__file__).with_name("resources") / "log4j2-quiet.properties"
    # the driver JVM is started by spark-submit before any SparkConf applies: its own options go on its command
    # line, or Spark prints its default logging banner (left alone when the user set PYSPARK_SUBMIT_ARGS); C1 only:
    # a copy's JVM schedules and commits, it runs no heavy code (measured 2 s less start-up); the class archive
    # when this machine has one
    options = [f"-Dlog4j2.configurationFile=file:{quiet}", "-XX:TieredStopAtLevel=1"]
    if "PYSPARK_SUBMIT_ARGS" not in os.environ:
        options += _jvm.driver_options()
    # Spark's launcher splits the value as a shell would
    java_options = " ".join(shlex.quote(option) for option in options)
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options {shlex.quote(java_options)} pyspark-shell")
    try:
        return _start_session(SparkSession, master, java_options)
    except Exception as exc:  # a bad master URL, no Java: one line, not the gateway's stack
        raise OptionsError(f"option 'master': {master}: Spark cannot start: {root_cause(exc)}") from None


def stop_session(spark: Any) -> None:
    """``spark.stop()`` without its wait for PySpark's accumulator server, whose connection from the JVM is polled
    once a second: after any Python task, ``stop()`` waited up to 1 s (0.93-0.99 s measured) for that poll to see
    the server shut down (``pyspark/accumulators.py``, ``UpdateRequestHandler.handle``). The JVM's context, the
    session and PySpark's record of them are stopped and cleared by ``stop()`` itself, before this returns; the
    server, whose JVM side is gone, is told to shut down and ends in a thread of its own at its next poll. On a
    PySpark without the attribute, a plain ``stop()``."""
    sc = spark.sparkContext
    server = getattr(sc, "_accumulatorServer", None)
    if server is None or not callable(getattr(server, "shutdown", None)):
        spark.stop()
        return
    sc._accumulatorServer = None  # stop() skips the server: it is shut down below, without waiting
    try:
        spark.stop()
    finally:
        server.server_shutdown = True  # the handler's poll loop ends at its next wake-up
        threading.Thread(target=server.shutdown, name="splitsource-accumulator-stop", daemon=True).start()


def _start_session(SparkSession: Any, master: str, java_options: str) -> Any:  # noqa: N803 - the class, passed in
    from pyspark import SparkConf, SparkContext

    conf = (SparkConf().setMaster(master).setAppName("splitsource copy").set("spark.ui.enabled", "false")
            .set("spark.sql.session.timeZone", "UTC").set("spark.driver.extraJavaOptions", java_options)
            .set("spark.ui.showConsoleProgress", "false"))
    if SparkContext._gateway is None:  # no JVM in this process yet: the copy's own, its warning left out
        SparkContext(conf=conf, gateway=_quiet_gateway(conf))
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    return spark


# what the driver JVM prints on its own at every start, whatever its logging says (Spark's launcher adds the
# incubating vector module, and Java warns of incubator modules on stderr with no option to silence it)
_JVM_NOISE = (b"WARNING: Using incubator modules",)


def _quiet_gateway(conf: Any) -> Any:
    """PySpark's gateway to a driver JVM whose stderr goes through this process: every line passes on to this
    process's stderr as it comes, but Java's incubator warning (a quiet copy printed it on every run)."""
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    stderr = getattr(getattr(gateway, "proc", None), "stderr", None)  # none: a JVM that was running already
    if stderr is not None:  # (PYSPARK_GATEWAY_PORT), whose output is not ours
        threading.Thread(target=_pass_on, args=(stderr,), name="splitsource-jvm-stderr", daemon=True).start()
    return gateway


def _pass_on(stream: Any) -> None:
    """Copy the JVM's stderr to ours, line by line, until it ends (the JVM exits), leaving out :data:`_JVM_NOISE`;
    it keeps reading when ours is gone, so that the JVM never blocks on a full pipe."""
    for line in iter(stream.readline, b""):
        if line.startswith(_JVM_NOISE):
            continue
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(2, view):]
        except OSError:
            pass
    stream.close()


def record() -> int:
    """The recording child: the copy's own session, running what a Spark-engine copy's driver runs (a job group,
    one job of Python tasks over packed groups, its result collected), so its JVM loads the classes a copy's
    driver loads; the JVM writes the archive as it exits (where :data:`splitsource.spark._jvm.RECORD_ENV` says)."""
    os.nice(10)  # beside a copy: its JVM and workers come first
    signal.alarm(int(_jvm.RECORD_TIMEOUT_S))  # orphaned (its copy was killed): it still ends by itself
    spark = start_session("local[2]")
    try:
        sc = spark.sparkContext
        sc.setJobGroup("splitsource-recording", "splitsource: recording the driver's class archive", True)
        groups = [[bytes([i])] * 2 for i in range(sc.defaultParallelism)]
        sizes = sc.parallelize(groups, len(groups)).mapPartitionsWithIndex(
            lambda index, part: [(index, sum(len(g) for g in part))]).collect()
        sc.cancelJobGroup("splitsource-recording")
    finally:
        stop_session(spark)
    return 0 if len(sizes) == len(groups) else 1


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        print("usage: python -m splitsource.spark._session --record   (the class archive's recording child)",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(record())
