"""The Spark engine of ``splitsource copy``: the coordinator with Spark's tasks (no streaming query), its live
progress, and a failing task."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from tests.splitsource.copyjob.test_copy import committed_rows, finished, run

pytestmark = [pytest.mark.spark]


def ids(out: Path) -> list[int]:
    """The ``id`` column as pyarrow's dataset reader reads the output's finished files."""
    files = sorted(str(out / f) for f in finished(out))
    return sorted(ds.dataset(files, format="parquet").to_table(columns=["id"]).column("id").to_pylist())


def test_a_failing_spark_task_is_one_line_and_commits_nothing_of_its_batch(tmp_path: Path) -> None:
    out = tmp_path / "out"
    gen = ["--connector", "generator", "-o", "rows=8000", "-o", "split_rows=1000", "-o", "columns=id:bigint"]
    result = run(["copy", *gen, "-o", "fail_at_row=5500", "-o", "fail_kind=fatal", "--output", str(out),
                  "--max-splits-per-batch", "2"])
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert re.search(r"reading split\(s\) range-5 failed: injected failure at row 5500 .*\(details: .*"
                     r"splitsource-copy-error.log\)$", line), result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "at org.apache" not in result.stderr
    assert committed_rows(out) == 4000  # batches 0 and 1 committed; batch 2 (splits 4, 5) not at all
    assert not [p for p in out.rglob("*") if p.name.endswith((".in-progress", ".pending"))], \
        "the failed batch's files were not swept"
    assert "Traceback" in (tmp_path / "out.checkpoint" / "splitsource-copy-error.log").read_text()
    again = run(["copy", *gen, "--output", str(out), "--max-splits-per-batch", "2", "--quiet"])
    assert again.returncode == 0 and "this run: 4,000 rows" in again.stdout, again.stdout + again.stderr
    assert ids(out) == list(range(8000))


def test_progress_moves_while_a_batch_runs_and_the_users_session_stays(tmp_path: Path, spark: Any) -> None:
    """One batch of 4 splits, about 4 s: the tasks' reports reach the coordinator before the batch ends."""
    import splitsource

    seen: list[tuple[int, int, bool]] = []

    class Recorder:
        def update(self, splits: int, total: int, rows: int, final: bool = False) -> None:
            seen.append((splits, rows, final))

    summary = splitsource.copy(
        "generator", {"rows": "8000", "split_rows": "2000", "batch_rows": "200", "fetch_delay_ms": "200",
                      "columns": "id:bigint"},
        str(tmp_path / "out"), spark=spark, progress=Recorder(),  # type: ignore[arg-type]
    )
    assert (summary.total_rows, summary.batches) == (8000, 1)
    live = [rows for _, rows, final in seen if not final and 0 < rows < 8000]
    assert live, f"no progress while the batch ran: {seen}"
    assert [r for _, r, _ in seen] == sorted(r for _, r, _ in seen)
    assert spark.range(3).count() == 3, "the copy stopped the user's session"
    assert not (tmp_path / "out.checkpoint" / "spark" / "progress").exists()


def test_a_read_task_reports_each_split_finished_as_it_asks_for_the_next(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The task function itself, in this process: 3 splits of 1,000 rows, one report per request for a split."""
    from splitsource.spark import _copy
    from tests.fixtures import generator_task

    calls: list[tuple[int, int, bool]] = []

    class Recorder:
        def __init__(self, directory: str, batch: int, task: int) -> None:
            assert (batch, task) == (7, 1)

        def __call__(self, splits: int, rows: int, final: bool = False) -> None:
            calls.append((splits, rows, final))

    monkeypatch.setattr(_copy, "TaskProgress", Recorder)
    task, encoded = generator_task(tmp_path / "out", "id:bigint")
    (result,) = list(_copy.read_task(task, str(tmp_path), 7)(1, [encoded]))
    assert (result.rows, result.splits, len(result.files)) == (3000, 3, 1)
    assert [c[0] for c in calls] == [0, 1, 2, 3, 3], calls  # 4 requests (the last one gets None), then the end
    assert [c[1] for c in calls] == [0, 1000, 2000, 3000, 3000] and calls[-1][2], calls


def test_a_stop_before_the_batch_job_reaches_spark_still_cancels_it(tmp_path: Path, spark: Any) -> None:
    """Ctrl-C lands after the batch's job thread began but before its job reached Spark: a single cancel would
    find no job, and the copy would wait for the whole batch (two tasks of 20 s). The fault is injected there: the
    job's submission is held until the coordinator has cancelled once."""
    import splitsource

    real = spark.sparkContext
    order: list[str] = []
    first_cancel = threading.Event()

    class Rdd:
        def __init__(self, rdd: Any) -> None:
            self._rdd = rdd

        def mapPartitionsWithIndex(self, f: Any) -> Any:  # noqa: N802 - Spark's name
            os.kill(os.getpid(), signal.SIGINT)  # the stop: KeyboardInterrupt in the coordinator's thread
            assert first_cancel.wait(30), "the coordinator did not cancel"
            order.append("job submitted")
            return self._rdd.mapPartitionsWithIndex(f)

    class Context:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def parallelize(self, *args: Any, **kwargs: Any) -> Rdd:
            return Rdd(real.parallelize(*args, **kwargs))

        def cancelJobGroup(self, group: str) -> None:  # noqa: N802 - Spark's name
            order.append("cancel")
            real.cancelJobGroup(group)
            first_cancel.set()

    class Session:
        sparkContext = Context()

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        splitsource.copy("generator", {"rows": "8000", "split_rows": "2000", "batch_rows": "100",
                                       "fetch_delay_ms": "500", "columns": "id:bigint"},
                         str(tmp_path / "out"), spark=Session())
    stopped_in = time.monotonic() - started
    assert order[:2] == ["cancel", "job submitted"], order  # the fault happened: the job came after the cancel
    assert stopped_in < 15, f"the copy waited {stopped_in:.0f} s for a batch it had stopped"
    assert real.statusTracker().getActiveJobsIds() == [], "the batch's job still runs"
    assert committed_rows(tmp_path / "out") == 0
    assert spark.range(3).count() == 3


STOP_SCRIPT = """
import json, time
from pyspark import SparkContext
from splitsource.spark._session import start_session, stop_session

def python_job(spark):  # a Python task: the JVM reports its accumulators to PySpark's server from now on
    assert spark.sparkContext.parallelize([1, 2], 1).map(lambda x: x).sum() == 3

spark = start_session("local[1]")
python_job(spark)
server = spark.sparkContext._accumulatorServer
started = time.monotonic()
stop_session(spark)
ours = time.monotonic() - started
stopped = SparkContext._active_spark_context is None and spark.sparkContext._jsc is None
deadline = time.monotonic() + 10
while server.socket.fileno() != -1 and time.monotonic() < deadline:  # the server closes at its next poll
    time.sleep(0.05)
closed = server.socket.fileno() == -1
again = start_session("local[1]")  # a new session in the same process starts clean and runs
python_job(again)
started = time.monotonic()
again.stop()
plain = time.monotonic() - started
print(json.dumps({"ours": ours, "plain": plain, "stopped": stopped, "closed": closed}))
"""


def test_the_copys_session_stops_without_waiting_for_the_accumulator_servers_poll() -> None:
    """PySpark's stop() waits for its accumulator server's once-a-second poll after any Python task (the control:
    a plain stop in the same process); stop_session stops the JVM's context and the session at once and lets the
    server end at that poll, and a new session after it works."""
    result = subprocess.run([sys.executable, "-c", STOP_SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["stopped"] and figures["closed"], figures
    assert figures["plain"] > figures["ours"] + 0.3, f"a plain stop did not wait for the poll: {figures}"
    assert figures["ours"] < 0.5, f"the copy's stop waited for the accumulator server: {figures}"
