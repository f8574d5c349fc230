"""The Spark engine of the copy job: the coordinator of :mod:`splitsource.copyjob._coordinator` (plan and commit in
the copy's own process, offsets in ``<checkpoint>/spark/offsets/``) with Spark running each batch's read tasks.

- **plan**: the coordinator takes the batch's splits and logs the offset after them, before any split is read;
- **write**: one Spark job per batch, one task per packed group of splits (``pack_for``: at most about
  ``partition_size_mb`` each, at least ``min_partitions``, as many as a multiple of the cluster's cores, evenly
  filled, so that no wave of tasks leaves a core idle); each task runs
  :func:`~splitsource.copyjob._protocol.run_task` on its splits and hands back its committables (the pending files
  it wrote, its rows, its reader report), so the rows never cross into the JVM and back;
- **commit**: the coordinator commits the batch once (:meth:`~splitsource.sink.BucketingGlobalCommitter.commit_batch`).

A plain Spark job, not a streaming query: Spark's streaming machinery starts a Python worker for each step a
Python source takes (looking the source up, its schema, its offsets, its planning) one after another before a
batch's first task, 1-2 s each on a small machine; here the only Python workers are the read tasks'.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import splitsource.spark._jvm as _jvm
from splitsource._errors import OptionsError
from splitsource._fs import Location, resolve_filesystem
from splitsource._names import PROGRESS_DIR, SPARK_DIR
from splitsource._planning import concurrent_readers, pack_for
from splitsource.copyjob._coordinator import Batch, run_batches
from splitsource.copyjob._failures import failure, root_cause
from splitsource.copyjob._protocol import CopyRun, EngineResult, TaskOutcome, TaskSpec
from splitsource.copyjob._signals import deferred
from splitsource.spark._session import running_session, start_session, stop_session

__all__ = ["SPARK_DIR", "SparkEngine", "SparkTasks", "TaskProgress"]

_REPORT_EVERY_S = 0.5
_POLL_S = 0.5
_CANCEL_WAIT_S = 60.0  # a cancelled batch's tasks end within Spark's python worker kill timeout (2 s by default)


class TaskProgress:
    """A read task's progress, written as ``<directory>/<batch>-<task>.json`` (atomically, at most every half
    second, and at the end), where the coordinator adds it up: a Spark task's result reaches the driver only when
    the task ends. Best effort: a report that cannot be written is skipped, never a failure of the task."""

    def __init__(self, directory: str, batch: int, task: int) -> None:
        self._fs, base = resolve_filesystem(directory)
        self._path = f"{base}/{batch}-{task}.json"
        self._last = 0.0

    def __call__(self, splits: int, rows: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < _REPORT_EVERY_S:
            return
        self._last = now
        try:
            # progress only: nothing is lost if a power loss takes it
            self._fs.write(self._path, json.dumps({"splits": splits, "rows": rows}).encode(), durable=False)
        except OSError:
            pass


def reported(directory: Location, batch: int) -> tuple[int, int]:
    """(splits finished, rows written) the read tasks of ``batch`` have reported so far."""
    fs, base = directory.store, directory.path
    splits = rows = 0
    try:
        infos = fs.list(base)
    except OSError:
        return 0, 0
    for info in infos:
        if not info.name.startswith(f"{batch}-") or not info.name.endswith(".json"):
            continue
        try:
            report = json.loads(fs.read_text(info.path))
            splits += int(report["splits"])
            rows += int(report["rows"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or gone: the next poll sees it
    return splits, rows


def read_task(task: TaskSpec, progress_dir: str, batch_id: int
              ) -> Callable[[int, Iterable[list[bytes]]], Iterator[TaskOutcome]]:
    """The function of a batch's Spark tasks: task ``index`` reads the splits of its partition (one group of
    versioned splits) and writes their rows (:func:`~splitsource.copyjob._protocol.run_task`), reporting its
    progress into ``progress_dir``; it yields its outcome."""

    def run(index: int, partition: Iterable[list[bytes]]) -> Iterator[TaskOutcome]:
        from splitsource.copyjob._protocol import run_task

        remaining = [split for group in partition for split in reversed(group)]
        report = TaskProgress(progress_dir, batch_id, index)
        asked = [0]

        def ask(rows: int) -> bytes | None:
            report(asked[0], rows)  # asking again: every split handed out before is finished
            asked[0] += 1
            return remaining.pop() if remaining else None

        result = run_task(replace(task, index=index), ask)
        report(result.splits, result.rows, final=True)
        yield result

    return run


class SparkTasks:
    """The Spark engine's task pool: one Spark job per batch on the session ``session`` will give (the engine's,
    which may still be starting while the coordinator plans the first batch)."""

    def __init__(self, checkpoint: Location, session: Future[Any]) -> None:
        self._checkpoint = checkpoint
        self._session = session
        self._progress = checkpoint.child(SPARK_DIR, PROGRESS_DIR)
        _remove_tree(self._progress)  # reports of a run that was killed
        self._progress.store.make_dirs(self._progress.path)

    def run(self, batch: Batch, progress: Callable[[int, int], None]) -> list[TaskOutcome]:
        with deferred():  # SIGTERM must not break a py4j call (the session's start, a question to the JVM)
            sc = self._session.result().sparkContext
            slots = sc.defaultParallelism
        groups = pack_for(batch.framework, batch.splits, slots)
        # the read rate limit is shared by the tasks that run at once: at most one per core of the cluster
        task = replace(batch.task, readers=concurrent_readers(batch.framework, len(groups), slots))
        group_id = f"splitsource-copy-{uuid.uuid4().hex[:12]}"
        job: Future[list[TaskOutcome]] = Future()
        cancelled = threading.Event()

        def collect() -> None:
            try:
                sc.setJobGroup(group_id, f"splitsource copy: batch {batch.batch_id}", interruptOnCancel=True)
                rdd = sc.parallelize([[batch.encoded[s.split_id] for s in g] for g in groups], len(groups))
                if cancelled.is_set():
                    raise KeyboardInterrupt("the batch was stopped before its job started")
                reading = read_task(task, self._progress.uri, batch.batch_id)
                job.set_result(rdd.mapPartitionsWithIndex(reading).collect())
            except BaseException as exc:  # noqa: BLE001 - handed to the coordinator's thread by the future
                job.set_exception(exc)

        # the job runs in a thread of its own: this one waits with a timeout, where Ctrl-C and SIGTERM land
        # outside any py4j call, and adds up the tasks' progress meanwhile
        threading.Thread(target=collect, name=f"splitsource-batch-{batch.batch_id}", daemon=True).start()
        try:
            while True:
                try:
                    return job.result(timeout=_POLL_S)
                except TimeoutError:
                    progress(*reported(self._progress, batch.batch_id))
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C or SIGTERM: the batch's tasks stop before the copy does
            cancelled.set()
            deadline = time.monotonic() + _CANCEL_WAIT_S
            while not job.done() and time.monotonic() < deadline:
                # again until the job ends: a stop that lands before the job is submitted cancels nothing once
                with deferred():
                    sc.cancelJobGroup(group_id)
                try:
                    job.exception(timeout=_POLL_S)
                except TimeoutError:
                    pass
            raise
        except Exception as exc:  # a task failed: its message, without the JVM stack (kept in the error log)
            raise failure(root_cause(exc), str(exc), self._checkpoint) from None
        finally:
            _clear_reports(self._progress, batch.batch_id)

    def close(self) -> None:
        _remove_tree(self._progress)


class SparkEngine:
    """The Spark engine (see :class:`~splitsource.copyjob._protocol.Engine`): the read tasks of each batch are one
    Spark job on ``spark``, else on the session running in this process, else on a session of its own on
    ``master``, started when first needed and stopped by :meth:`close`: the one owner of the copy's session.
    Making one starts nothing."""

    name = SPARK_DIR
    sink_defaults: Mapping[str, str] = {}  # an executor task's budget is the sink's own default

    def __init__(self, master: str = "local[2]", spark: Any = None) -> None:
        if spark is None and not MASTER_URL.fullmatch(master):
            raise OptionsError(f"option 'master': {master!r} is not a Spark master URL: use local[N], "
                               "spark://HOST:PORT, k8s://HOST:PORT or yarn")
        self.master = master
        self._given = spark
        self._session: Future[Any] | None = None  # the copy's session, once asked for (session())
        self._own = False  # whether this engine started it, and so stops it

    def _found(self) -> Any:
        """The session given, else the one running in this process (None: the engine starts its own)."""
        if self._given is None:
            self._given = running_session()
        return self._given

    @property
    def on_cluster(self) -> bool:
        found = self._found()
        master = found.sparkContext.master if found is not None else self.master
        return not str(master).startswith("local")

    def session(self, after_start: Callable[[], None] | None = None) -> Future[Any]:
        """The copy's session: the one found, else one of its own on ``master``, started once, in the background
        (``after_start`` runs once it is up, only for a session started here)."""
        if self._session is None:
            self._session = Future()
            found = self._found()
            if found is not None:
                self._session.set_result(found)
            else:
                self._own = True
                threading.Thread(target=_start, args=(self._session, self.master, after_start),
                                 name="splitsource-spark-start", daemon=True).start()
        return self._session

    def check_storage(self, places: list[tuple[str, Location]]) -> None:
        """On a cluster, the executors must see what this process sees (:func:`check_shared_storage`)."""
        if self.on_cluster:
            check_shared_storage(self.session().result(), places)

    def run(self, run: CopyRun) -> EngineResult:
        """Run the copy with Spark's tasks on the copy's session."""
        # the first copy of a machine records the driver JVM's class archive beside its own work, once its session
        # is up (splitsource.spark._jvm): every later copy's session starts from it, about 1.5 s sooner
        starting = self._session is None and self._found() is None
        recording = _jvm.recorder() if starting and "PYSPARK_SUBMIT_ARGS" not in os.environ else None
        tasks = SparkTasks(run.checkpoint, self.session(after_start=recording.start if recording else None))
        try:
            result = run_batches(run, tasks, SPARK_DIR)
        except BaseException:
            if recording is not None:
                recording.stop()
            raise
        if recording is not None:
            if recording.running and run.progress is not None:
                print("splitsource copy: recording the Spark driver's class archive, once per machine (about 15 s; "
                      f"{_jvm.SWITCH_ENV}=off skips it)", file=sys.stderr, flush=True)
            recording.finish()
        return result

    def close(self) -> None:
        session, self._session = self._session, None
        if not self._own or session is None:
            return
        self._own = False
        try:
            spark = session.result()
        except BaseException:  # noqa: BLE001 - it never started: nothing to stop
            return
        with deferred():
            stop_session(spark)


def _start(session: Future[Any], master: str, after_start: Callable[[], None] | None) -> None:
    try:
        session.set_result(start_session(master))
    except BaseException as exc:  # noqa: BLE001 - handed to the coordinator's thread by the future
        session.set_exception(exc)
        return
    if after_start is not None:
        after_start()


# the master URLs Spark takes
MASTER_URL = re.compile(r"local(\[[0-9*]+(,[0-9]+)?\])?|local-cluster\[[0-9, ]+\]|(spark|k8s)://\S+|yarn")


def check_shared_storage(spark: Any, places: list[tuple[str, Location]]) -> None:
    """On a cluster: one tiny task writes a probe into each place (``(what, location)``), and this process must
    read it back; if it cannot, the executors write where the coordinator does not read (a local path on a
    cluster), and the copy is refused before it claims anything."""
    token = uuid.uuid4().hex
    probes = [(what, place.child(f"_splitsource-probe-{token}")) for what, place in places]

    def write(_: Iterable[Any]) -> Iterator[str]:
        import socket

        from splitsource._fs import resolve_filesystem as resolve

        for _what, probe in probes:
            fs, path = resolve(probe.uri)  # on the executor: its own store
            fs.make_dirs(path.rsplit("/", 1)[0])
            fs.write(path, token.encode(), durable=False)
        yield socket.gethostname()

    with deferred():
        host = spark.sparkContext.parallelize([0], 1).mapPartitions(write).collect()[0]
    try:
        for what, probe in probes:
            fs, path = probe.store, probe.path
            try:
                seen = fs.read_bytes(path)
            except (FileNotFoundError, OSError):
                seen = b""
            if seen != token.encode():
                raise OptionsError(
                    f"{what}: Spark's executors (on {host}) write where this machine does not read: a file one "
                    "of them wrote there is not here; on a cluster the output and the checkpoint must be on "
                    "storage every machine shares (s3://, hdfs://, a shared mount)")
    finally:
        for _what, probe in probes:
            try:
                probe.store.delete(probe.path)
            except OSError:
                pass


def _clear_reports(directory: Location, batch: int) -> None:
    try:
        for info in directory.store.list(directory.path):
            if info.name.startswith(f"{batch}-"):
                directory.store.delete(info.path)
    except OSError:
        pass


def _remove_tree(directory: Location) -> None:
    try:
        directory.store.delete_dir(directory.path)
    except OSError:
        pass
