"""The Spark engine of the copy job: the batch protocol (:mod:`splitsource.copyjob._protocol`) run as a Spark
streaming query with ``trigger(availableNow=True)``, Spark's checkpoint holding the offsets.

- **plan**: the copy's stream reader (:class:`CopyStreamReader`, ``format("splitsource-copy")``, registered by
  :func:`run_copy`) is the general stream reader of ``format("splitsource")``: ``latestOffset`` takes the next
  batch of splits and Spark writes the offset to its checkpoint before the batch runs;
- **write**: each read task runs :func:`~splitsource.copyjob._protocol.copy_task` on its splits and emits only its
  committables (one small row per pending file), so the rows never cross into the JVM and back;
- **commit**: the query's ``foreachBatch`` function (:class:`BatchCommit`), on the driver, commits the batch once
  (:meth:`~splitsource.sink.BucketingGlobalCommitter.commit_batch`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from serializers import read_envelope, write_envelope
from splitsource._errors import CheckpointError, OptionsError, SplitSourceError
from splitsource._fs import read_text, resolve_filesystem, write_atomically
from splitsource._offsets import PLANS_DIR, START_OVER, PlanStore, initial_offset, source_fingerprint
from splitsource._planning import build_source
from splitsource.copyjob._job import committed_rows, failure, root_cause
from splitsource.copyjob._ledger import decode_counts, encode_counts, split_counts, write_batch
from splitsource.copyjob._protocol import CopyRun, EngineResult, ReadStats, copy_task, task_report
from splitsource.copyjob._signals import deferred, stop_requested
from splitsource.runtime._read import conform_batch
from splitsource.runtime._source_reader import ReaderMetrics
from splitsource.sink._committer import BucketingGlobalCommitter
from splitsource.sink._files import PENDING_FILE_SERIALIZER, PendingFile
from splitsource.sink._options import parse_sink_options
from splitsource.spark._reader import SplitsPartition
from splitsource.spark._sink import task_context
from splitsource.spark._stream import SplitSourceStreamReader

__all__ = ["CopyDataSource", "CopyStreamReader", "TaskProgress", "live_progress", "run_copy", "start_session"]

SINK_OPTION = "copy_sink"  # the bucketing sink's options as JSON
PROGRESS_OPTION = "copy_progress"  # a directory the read tasks report their progress into
PROGRESS_DIR = "progress"  # in the checkpoint: <batch>-<partition>.json, one per running read task
_REPORT_EVERY_S = 0.5
# what a read task emits: one row per pending file it wrote (versioned bytes) with its rows, and one more row (no
# file) with the rows per split it read (splitsource.copyjob._ledger.encode_counts), for the commit on the driver
COMMITTABLES_SCHEMA = pa.schema([pa.field("file", pa.binary()), pa.field("rows", pa.int64(), nullable=False),
                                 pa.field("splits", pa.binary())])


class TaskProgress:
    """A read task's progress, written as ``<directory>/<batch>-<partition>.json`` (atomically, at most every
    half second, and at the end), where the driver adds it up: Spark's own metrics reach the driver only when the
    batch ends. Best effort: a report that cannot be written is skipped, never a failure of the task."""

    def __init__(self, directory: str, batch: int, partition: int) -> None:
        self._fs, base = resolve_filesystem(directory)
        self._path = f"{base}/{batch}-{partition}.json"
        self._last = 0.0

    def __call__(self, splits: int, rows: int, final: bool, metrics: ReaderMetrics) -> None:
        now = time.monotonic()
        if not final and now - self._last < _REPORT_EVERY_S:
            return
        self._last = now
        report: dict[str, Any] = {"splits": splits, "rows": rows}
        if final:  # what the summary adds up once the batch is committed
            report.update(final=task_report(metrics))
        try:
            write_atomically(self._fs, self._path, json.dumps(report).encode())
        except OSError:
            pass


def live_progress(directory: str, after_batch: int, stats: ReadStats | None = None) -> tuple[int, int]:
    """(splits, rows) the read tasks of batches after ``after_batch`` have reported. Reports of batches up to it
    (committed) are added to ``stats`` and removed."""
    fs, base = resolve_filesystem(directory)
    splits = rows = 0
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError:
        return 0, 0
    for info in infos:
        batch, _, rest = info.base_name.partition("-")
        if not batch.isdigit() or not rest.endswith(".json"):
            continue
        try:
            report = json.loads(read_text(fs, info.path))
            if int(batch) <= after_batch:
                if stats is not None and report.get("final"):
                    stats.add(report["final"])
                fs.delete_file(info.path)
                continue
            splits += int(report["splits"])
            rows += int(report["rows"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or gone: the next poll sees it
    return splits, rows


class CopyStreamReader(SplitSourceStreamReader):
    """The stream reader of ``format("splitsource")`` whose read tasks write the rows into pending files and
    emit their committables (:data:`COMMITTABLES_SCHEMA`)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        options = {k.lower(): v for k, v in options.items()}
        raw = options.pop(SINK_OPTION, "")
        self._progress_dir = options.pop(PROGRESS_OPTION, "")
        try:
            self._sink = parse_sink_options(json.loads(raw))
        except ValueError:
            raise OptionsError(f"option '{SINK_OPTION}' is not JSON (it is set by splitsource copy)") from None
        super().__init__(options, schema)  # the schema is the committables'; the files hold the source's own

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        partition.environment.check()
        remaining = iter(partition.splits)
        index, _, batch_id = task_context()
        report = TaskProgress(self._progress_dir, batch_id, index) if self._progress_dir else None
        result = copy_task(self._options, self._sink, lambda: next(remaining, None), index,
                           f"partition-{len(partition.splits)}", report, readers=partition.readers)
        serializer = build_source(self._options)[1].split_serializer()
        counts = split_counts({s.split_id: write_envelope(serializer, s) for s in partition.splits},
                              result.metrics.split_rows)
        # one row per pending file, and one more (no file) with the rows per split, for the split ledger
        batch = pa.RecordBatch.from_arrays(
            [pa.array([*(write_envelope(PENDING_FILE_SERIALIZER, f) for f in result.files), None], pa.binary()),
             pa.array([*(f.rows for f in result.files), 0], pa.int64()),
             pa.array([*(None for _ in result.files), encode_counts(counts)], pa.binary())],
            schema=COMMITTABLES_SCHEMA)
        yield conform_batch(batch, self._expected)


class CopyDataSource(DataSource):
    """``format("splitsource-copy")``: the copy job's stream of committables (not for users: see ``copy``)."""

    @classmethod
    def name(cls) -> str:
        return "splitsource-copy"

    def schema(self) -> StructType:
        return from_arrow_schema(COMMITTABLES_SCHEMA)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        return CopyStreamReader(self.options, schema)


def start_session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    quiet = Path(__file__).with_name("resources") / "log4j2-quiet.properties"
    # the driver JVM is started by spark-submit before any SparkConf applies: its own options go on its command
    # line, or Spark prints its default logging banner (left alone when the user set PYSPARK_SUBMIT_ARGS)
    java_options = f"-Dlog4j2.configurationFile=file:{quiet} -XX:TieredStopAtLevel=1"
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options {shlex.quote(java_options)} pyspark-shell")
    try:
        return _start_session(SparkSession, master, quiet)
    except Exception as exc:  # a bad master URL, no Java: one line, not the gateway's stack
        raise OptionsError(f"--master {master}: Spark cannot start: {root_cause(exc)}") from None


def _start_session(SparkSession: Any, master: str, quiet: Path) -> Any:  # noqa: N803 - the class, passed in
    spark = (SparkSession.builder.master(master).appName("splitsource copy")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             # C1 only: a copy's JVM schedules and commits, it runs no heavy code; measured 2 s less start-up
             .config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile=file:{quiet} -XX:TieredStopAtLevel=1")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    return spark


def run_copy(run: CopyRun, *, master: str = "local[2]", spark: Any = None) -> EngineResult:
    """Run the copy as a streaming query on ``spark`` (or a session of its own on ``master``, stopped after)."""
    source, read_options, sink_raw, committer = run.source, run.read_options, run.sink_raw, run.committer
    checkpoint, progress, rows_before = run.checkpoint, run.progress, run.rows_before
    plans = f"{checkpoint}/{PLANS_DIR}"
    last_offset = _newest_offset(checkpoint)
    if last_offset is None:  # a fresh start: plan here, once; the stream reader's initialOffset takes this plan
        framework, _ = build_source(read_options)
        store = PlanStore(plans)
        last_offset = initial_offset(source, source_fingerprint(source), framework.parallelism, store)
        store.keep_initial(last_offset)
        store.prune(keep=last_offset["plan"])  # no offset refers to any other plan yet
    own_session = spark is None
    spark = spark or start_session(master)
    batches: set[int] = set()
    stats = ReadStats()
    # the read tasks write the part files themselves and hand only their committables to the sink's commit
    progress_dir = f"{checkpoint}/{PROGRESS_DIR}"
    _remove_tree(progress_dir)  # reports of a run that was killed
    fs, base = resolve_filesystem(progress_dir)
    fs.create_dir(base, recursive=True)
    stream_options = {**read_options, SINK_OPTION: json.dumps(dict(sink_raw)), PROGRESS_OPTION: progress_dir,
                      "plan_location": plans}
    # the read rate limit is shared by the tasks that run at once: at most one per core of the cluster
    stream_options.setdefault("reader_slots", str(spark.sparkContext.defaultParallelism))
    try:
        spark.dataSource.register(CopyDataSource)
        frame = spark.readStream.format(CopyDataSource.name()).options(**stream_options).load()
        commit = BatchCommit(committer, checkpoint)
        query = (frame.writeStream.foreachBatch(commit)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True)
                 .queryName(f"splitsource-copy-{os.getpid()}").start())
        try:
            committed, seen = rows_before, 0
            with deferred():  # SIGTERM must not interrupt a py4j call: it is handled here, between calls
                while not query.awaitTermination(1.0):
                    if stop_requested():
                        query.stop()
                        break
                    done_batch = _collect_progress(query, batches, last_offset)
                    # what the running batch's tasks report, on top of what is committed
                    live_splits, live_rows = live_progress(progress_dir, done_batch, stats)
                    if progress is not None:
                        if len(batches) != seen:  # the commit log changes only when a batch commits
                            committed, seen = committed_rows(committer), len(batches)
                        progress(int(last_offset.get("taken", 0)) + live_splits, int(last_offset.get("total", -1)),
                                 committed - rows_before + live_rows)
            done_batch = _collect_progress(query, batches, last_offset)
        except KeyboardInterrupt:
            query.stop()
            raise
        error = query.exception()
        if error is not None:  # a failed batch's whole text, not the short one Spark got back (see passed_on)
            full = f"{commit.failure}\n\n{error}" if commit.failure else str(error)
            raise failure(root_cause(RuntimeError(full)), full, checkpoint)
        live_progress(progress_dir, done_batch, stats)  # the last batches' reports
    except SplitSourceError:
        raise
    except Exception as exc:  # Spark's own exceptions: keep the message, drop the JVM stack
        raise failure(root_cause(exc), str(exc), checkpoint) from None
    finally:
        if own_session:
            spark.stop()
        _remove_tree(progress_dir)
    return EngineResult(int(last_offset.get("taken", 0)), int(last_offset.get("total", -1)), len(batches), stats)


class BatchCommit:
    """Step 3 of the batch protocol, as the query's ``foreachBatch`` function: it runs in the driver's own Python
    process, so the commit starts no Python worker of its own (a ``writeStream.format("bucketing")`` sink cost
    three: the sink's data source, its stream writer and the runner of its commit, 1.2-1.6 s each).

    It collects the batch's committables (the read tasks write the part files; their rows are only the pending
    files and the rows per split), writes the split ledger, then commits the batch once under Spark's query id
    (:meth:`~splitsource.sink.BucketingGlobalCommitter.commit_batch`): a batch Spark replays after a restart, that
    the output has committed already, has its new files deleted. Files of a batch that failed are swept by the
    next commit."""

    def __init__(self, committer: BucketingGlobalCommitter, checkpoint: str) -> None:
        self._committer = committer
        self._checkpoint = checkpoint
        self._query_id = ""
        self.failure = ""  # the whole text of the batch that failed to run, for the error log

    def __call__(self, frame: Any, batch_id: int) -> None:
        try:
            rows = frame.collect()  # runs the batch: its read tasks write the files
        except Exception as exc:  # noqa: BLE001 - every failure goes back to Spark, shortened
            self.failure = str(exc)
            raise BatchFailed(passed_on(exc)) from None
        files: list[PendingFile] = []
        counts = []
        for row in rows:
            if row["file"] is not None:
                files.append(read_envelope(PENDING_FILE_SERIALIZER, bytes(row["file"])))
            if row["splits"] is not None:
                counts.extend(decode_counts(bytes(row["splits"])))
        query_id = self._query_id = self._query_id or streaming_query_id(self._checkpoint)
        self._committer.commit_batch(files, query_id=query_id, batch_id=batch_id,
                                     before_commit=partial(write_batch, self._checkpoint, query_id, batch_id, counts))


class BatchFailed(SplitSourceError):
    """A batch's read tasks failed, or the query was stopped while they ran (the text: :func:`passed_on`)."""


_JAVA_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more)")
PASSED_ON_CHARS = 2000


def passed_on(exc: BaseException) -> str:
    """What the JVM gets back of a batch that failed in the ``foreachBatch`` function. py4j hands it the whole
    Python traceback, and Spark tells a query stopped mid-batch from a failed one by matching that text with a
    regular expression (``StreamExecution.PROXY_ERROR``, ``...calling((.|\\r\\n|\\r|\\n)*)(...)``) whose recursion
    overflows the stream thread's stack on a long text: the JVM then prints a ``StackOverflowError`` of a thousand
    lines on stderr (seen in CI, on a stopped copy). So: the error's lines without Java stack frames, at most
    ``PASSED_ON_CHARS`` (its head and its tail, where the causes are), named as py4j names its error so the
    expression still recognises an interrupted job."""
    lines = [line for line in str(exc).splitlines() if line.strip() and not _JAVA_FRAME.match(line)]
    text = "\n".join(lines)
    if len(text) > PASSED_ON_CHARS:
        half = PASSED_ON_CHARS // 2
        text = f"{text[:half]}\n...\n{text[-half:]}"
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {text}"


def streaming_query_id(checkpoint: str) -> str:
    """The id Spark keeps for the query in ``<checkpoint>/metadata`` (written when the query starts, before its first
    batch; the same after every restart), which names the copy's batches in the output's commit log."""
    fs, base = resolve_filesystem(checkpoint)
    try:
        return str(json.loads(read_text(fs, f"{base}/metadata").splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {checkpoint}: Spark's query metadata cannot be read ({exc}); "
                              f"{START_OVER}") from None


def _collect_progress(query: Any, batches: set[int], last_offset: dict[str, Any]) -> int:
    """Record the completed batches and the newest offset; returns the newest completed batch id (-1: none)."""
    done = -1
    for report in query.recentProgress:
        done = max(done, int(report["batchId"]))
        if int(report["numInputRows"]) > 0:  # Spark's no-op batches carry no data: not batches of the copy
            batches.add(int(report["batchId"]))
        sources = report.get("sources") or []
        if sources and sources[0].get("endOffset"):
            end = sources[0]["endOffset"]
            offset = json.loads(end) if isinstance(end, str) else end
            if int(offset.get("taken", 0)) >= int(last_offset.get("taken", 0)):
                last_offset.update(taken=offset.get("taken", 0), total=offset.get("total", -1))
    return done


def _remove_tree(directory: str) -> None:
    try:
        fs, base = resolve_filesystem(directory)
        fs.delete_dir(base)
    except OSError:
        pass


def _newest_offset(checkpoint: str) -> dict[str, Any] | None:
    """The newest offset in Spark's checkpoint (None: none yet), for progress: splits taken and the estimate."""
    offsets = Path(checkpoint) / "offsets"
    if not offsets.is_dir():
        return None
    newest = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name), default=None)
    if newest is None:
        return None
    for line in reversed(newest.read_text().splitlines()):
        if line.startswith("{") and '"taken"' in line:
            found = json.loads(line)
            return {"taken": int(found.get("taken", 0)), "total": int(found.get("total", -1))}
    return None
